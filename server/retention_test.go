package server_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// TestRetentionOverHTTP: with a retention window, the background job
// deletes the messages stamped before it (here stamped an hour back through
// the store's clock, the test hook) while the conversation goes on. What a
// client sees: max_seq and the seqs stay; a pull from 0, or from a seq in
// the gap, returns the messages above the gap with completed set as for
// any page; new messages continue the seqs.
func TestRetentionOverHTTP(t *testing.T) {
	var back atomic.Int64 // how far back the store stamps messages, in ms
	back.Store(int64(time.Hour / time.Millisecond))
	ts := newServer(t, func(c *testConfig) {
		c.storage.Retention = 10 * time.Minute
		c.storage.RetentionEvery = 20 * time.Millisecond
		c.storage.RetentionBatch = 2
		c.storage.Clock = func() int64 { return time.Now().UnixMilli() - back.Load() }
	})
	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	g := alice.group(t, "g", bob)
	old := bob.sendN(t, g.ID, 5)
	if old[4].Seq != 5 {
		t.Fatalf("old seqs %v", seqsOf(old))
	}
	back.Store(0)
	deadline := time.Now().Add(waitTimeout)
	for len(alice.all(t, g.ID)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("old messages still there: %v", seqsOf(alice.all(t, g.ID)))
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Emptied by retention: the conversation still says max_seq 5.
	if p := alice.page(t, g.ID, "after_seq=0&limit=10"); len(p.Messages) != 0 || !p.Completed || p.MaxSeq != 5 {
		t.Fatalf("emptied conversation: %+v", p)
	}
	if c := alice.conversation(t, g.ID); c.MaxSeq != 5 || c.LastMessage != nil {
		t.Fatalf("entry after retention: max_seq %d, last_message %+v", c.MaxSeq, c.LastMessage)
	}
	fresh := bob.sendN(t, g.ID, 3)
	if !equalSeqs(seqsOf(fresh), seqRange(6, 8)) {
		t.Fatalf("seqs after retention %v, want 6..8", seqsOf(fresh))
	}
	if got := seqsOf(alice.all(t, g.ID)); !equalSeqs(got, seqRange(6, 8)) {
		t.Fatalf("pull from 0: %v, want 6..8", got)
	}
	// From inside the gap, in pages of 2: 6 7 (not completed), then 8.
	p := alice.page(t, g.ID, "after_seq=3&limit=2")
	if !equalSeqs(seqsOf(p.Messages), []int64{6, 7}) || p.Completed || p.MaxSeq != 8 {
		t.Fatalf("page after 3: %v completed %v max_seq %d", seqsOf(p.Messages), p.Completed, p.MaxSeq)
	}
	p = alice.page(t, g.ID, "after_seq=7&limit=2")
	if !equalSeqs(seqsOf(p.Messages), []int64{8}) || !p.Completed {
		t.Fatalf("page after 7: %v completed %v", seqsOf(p.Messages), p.Completed)
	}
	// Backward from the end crosses the gap too.
	p = alice.page(t, g.ID, fmt.Sprintf("before_seq=%d&limit=10", 9))
	if !equalSeqs(seqsOf(p.Messages), seqRange(6, 8)) || !p.Completed {
		t.Fatalf("backward page: %v completed %v", seqsOf(p.Messages), p.Completed)
	}
}
