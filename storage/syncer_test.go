package storage

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/imserver/imserver/chat"
)

// TestPipelinedSyncAnswersAfterFsync holds the syncer's fsync and checks
// that no append is answered, and no message handed to the commit hook,
// before it returns; that the writer meanwhile goes on committing (the
// rows are in the database); and that everything is answered, in commit
// order, once the fsync is let go.
func TestPipelinedSyncAnswersAfterFsync(t *testing.T) {
	ctx := context.Background()
	var hookMu sync.Mutex
	var hooked []int64
	db, _ := openTest(t, Options{PipelinedSync: true, OnBatch: func(msgs []chat.Message, answer func()) {
		hookMu.Lock()
		for _, m := range msgs {
			hooked = append(hooked, m.Seq)
		}
		hookMu.Unlock()
		answer()
	}})
	if db.w.sync == nil {
		t.Fatal("PipelinedSync with FULL: no syncer")
	}
	if err := db.CreateGroup(ctx, "g", "g", "u", nil); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	entered := make(chan struct{}, 100)
	real := db.w.sync.fsync
	db.w.sync.fsync = func() error {
		entered <- struct{}{}
		<-release
		return real()
	}
	const n = 20
	var answered sync.WaitGroup
	var ansMu sync.Mutex
	var order []int64
	for i := range n {
		answered.Add(1)
		err := db.AppendNotify(ctx, chat.Message{Conv: "g", From: "u", ClientMsgID: fmt.Sprint(i), Kind: "text", Body: "x"},
			func(m chat.Message, dup bool, err error) {
				defer answered.Done()
				if err != nil {
					t.Errorf("append %d: %v", i, err)
					return
				}
				ansMu.Lock()
				order = append(order, m.Seq)
				ansMu.Unlock()
			})
		if err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the syncer never began an fsync")
	}
	// The batch is committed (visible to readers) but not answered.
	deadline := time.Now().Add(5 * time.Second)
	for {
		p, err := db.Messages(ctx, "g", "u", chat.PageQuery{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Messages) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	ansMu.Lock()
	early := len(order)
	ansMu.Unlock()
	hookMu.Lock()
	hookedEarly := len(hooked)
	hookMu.Unlock()
	if early != 0 || hookedEarly != 0 {
		t.Fatalf("%d answers and %d messages handed on while the fsync was held; want 0 and 0", early, hookedEarly)
	}
	close(release)
	answered.Wait()
	for i, seq := range order {
		if seq != int64(i+1) {
			t.Fatalf("answers in order %v, want 1..%d", order, n)
		}
	}
	hookMu.Lock()
	defer hookMu.Unlock()
	if len(hooked) != n {
		t.Fatalf("commit hook got %d messages, want %d", len(hooked), n)
	}
}

// TestPipelinedSyncFailure: a failed fsync fails the batch's appends (the
// senders retry; dedup finds what was stored) and hands nothing on.
func TestPipelinedSyncFailure(t *testing.T) {
	ctx := context.Background()
	var hookedMsgs int
	var mu sync.Mutex
	db, _ := openTest(t, Options{PipelinedSync: true, OnBatch: func(msgs []chat.Message, answer func()) {
		mu.Lock()
		hookedMsgs += len(msgs)
		mu.Unlock()
		answer()
	}})
	if err := db.CreateGroup(ctx, "g", "g", "u", nil); err != nil {
		t.Fatal(err)
	}
	real := db.w.sync.fsync
	db.w.sync.fsync = func() error { return errors.New("disk gone") }
	_, _, err := db.Append(ctx, chat.Message{Conv: "g", From: "u", ClientMsgID: "a", Kind: "text", Body: "x"})()
	if err == nil {
		t.Fatal("append answered without error after a failed fsync")
	}
	mu.Lock()
	if hookedMsgs != 0 {
		t.Errorf("%d messages handed on after a failed fsync", hookedMsgs)
	}
	mu.Unlock()
	db.w.sync.fsync = real
	m, dup, err := db.Append(ctx, chat.Message{Conv: "g", From: "u", ClientMsgID: "a", Kind: "text", Body: "x"})()
	if err != nil || !dup || m.Seq != 1 {
		t.Fatalf("retry after the failed fsync: seq %d dup %v err %v; want the stored seq 1, duplicate", m.Seq, dup, err)
	}
}

// TestPipelinedSyncConcurrentGapless runs the concurrent append test's
// load through the syncer.
func TestPipelinedSyncConcurrentGapless(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "test.db")
	db, err := Open(ctx, path, Options{PipelinedSync: true})
	if err != nil {
		t.Fatal(err)
	}
	const senders, each = 20, 50
	if err := db.CreateGroup(ctx, "g", "g", "u0", nil); err != nil {
		t.Fatal(err)
	}
	for s := 1; s < senders; s++ {
		if _, err := db.AddMembers(ctx, "g", []string{fmt.Sprint("u", s)}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if _, _, err := db.Append(ctx, chat.Message{Conv: "g", From: fmt.Sprint("u", s), ClientMsgID: fmt.Sprint(i), Kind: "text", Body: "x"})(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db2, err := Open(ctx, path, Options{PipelinedSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	p, err := db2.Messages(ctx, "g", "u0", chat.PageQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Messages) != senders*each {
		t.Fatalf("%d messages after reopening, want %d", len(p.Messages), senders*each)
	}
	for i, m := range p.Messages {
		if m.Seq != int64(i+1) {
			t.Fatalf("seq %d at %d: not gapless", m.Seq, i)
		}
	}
}
