package storage

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/imserver/imserver/chat"
)

// TestKeyFilter: every key added is reported, and at the size it was made
// for about 2% of keys never added are (the design's figure; 4% fails).
func TestKeyFilter(t *testing.T) {
	const n = 200000
	f := newKeyFilter(n)
	r := rand.New(rand.NewPCG(3, 4))
	keys := make([]dedupKey, n)
	for i := range keys {
		keys[i] = dedupKey{1 + r.Int64N(300), 1 + r.Int64N(500), r.Int64()}
		f.add(keys[i])
	}
	for _, k := range keys {
		if !f.mayHave(k) {
			t.Fatalf("key %v added but not reported", k)
		}
	}
	fp := 0
	for range n {
		if f.mayHave(dedupKey{1 + r.Int64N(300), 1 + r.Int64N(500), r.Int64()}) {
			fp++
		}
	}
	if rate := float64(fp) / n; rate > 0.04 {
		t.Fatalf("false positives %.2f%%, want about 2%%", 100*rate)
	}
	if f.mayHaveRange(7, 7, 100, 103) && !f.mayHave(dedupKey{7, 7, 100}) && !f.mayHave(dedupKey{7, 7, 101}) &&
		!f.mayHave(dedupKey{7, 7, 102}) && !f.mayHave(dedupKey{7, 7, 103}) {
		t.Fatal("mayHaveRange reports a range none of whose keys it reports")
	}
}

// TestDedupFilterRebuiltWhileMoving: filters are built again and again
// while appends fill the level in memory and the job moves keys to the
// files; every retry afterwards still gets its first seq, so no build
// missed a key that was moved while it read the levels.
func TestDedupFilterRebuiltWhileMoving(t *testing.T) {
	smallLevels(t)
	ctx := context.Background()
	db, _ := openTest(t, Options{})
	for _, g := range []string{"g0", "g1"} {
		if err := db.CreateGroup(ctx, g, g, "u0", []string{"u1"}); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	builds := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := db.buildFilter(ctx); err != nil {
				t.Error(err)
				return
			}
			builds++
		}
	}()
	first := map[string]chat.Message{}
	retry := func(id string) {
		t.Helper()
		m := first[id]
		got, dup, err := db.Append(ctx, chat.Message{Conv: m.Conv, From: m.From, ClientMsgID: id, Kind: chat.KindText, Body: "again"})()
		if err != nil || !dup || got.Seq != m.Seq {
			t.Fatalf("retry of %s: %+v dup %v %v, want seq %d", id, got, dup, err, m.Seq)
		}
	}
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 1000 {
		m := chat.Message{Conv: fmt.Sprint("g", i%2), From: fmt.Sprint("u", (i/2)%2), ClientMsgID: fmt.Sprint("c", i), Kind: chat.KindText, Body: fmt.Sprint("m", i)}
		got, dup, err := db.Append(ctx, m)()
		if err != nil || dup {
			t.Fatalf("send %d: %+v dup %v %v", i, got, dup, err)
		}
		first[m.ClientMsgID] = got
		// A retry of a message sent a little earlier: its key has
		// likely just moved to the files, maybe during a build.
		retry(fmt.Sprint("c", max(0, i-r.IntN(30))))
	}
	close(stop)
	wg.Wait()
	if db.compactor.moved.Load() == 0 || builds < 2 {
		t.Fatalf("moved %d keys, built %d filters: the test did not race them", db.compactor.moved.Load(), builds)
	}
	if db.w.filters.ready.Load() == nil {
		t.Fatal("no filter in use")
	}
	for id := range first {
		retry(id)
	}
	t.Logf("%d filters built, %d keys moved", builds, db.compactor.moved.Load())
}

// TestMemLevelShrinks: when the mark drops most of a big level, the level
// is copied into a map of its size (Go maps keep their buckets after
// deletes), and what is left is intact.
func TestMemLevelShrinks(t *testing.T) {
	l := &memLevel{keys: make(map[dedupKey]memEntry)}
	const n = 100000
	for i := int64(1); i <= n; i++ {
		k, e := dedupKey{1, 1, i}, memEntry{seq: i, id: i}
		l.keys[k] = e
		l.order = append(l.order, memKeyed{k, e})
	}
	l.grew()
	before := l.keys
	l.raise(n - 1000)
	if len(l.keys) != 1000 || l.peak != 1000 || l.size.Load() != 1000 {
		t.Fatalf("after the raise: %d keys, peak %d, size %d; want 1000 each", len(l.keys), l.peak, l.size.Load())
	}
	before[dedupKey{9, 9, 9}] = memEntry{}
	if _, ok := l.keys[dedupKey{9, 9, 9}]; ok {
		t.Fatal("the level still uses the map it outgrew")
	}
	for i := int64(n - 999); i <= n; i++ {
		if e, ok := l.keys[dedupKey{1, 1, i}]; !ok || e.seq != i {
			t.Fatalf("key %d: %+v %v after the copy", i, e, ok)
		}
	}
	// A small level is left as it is.
	small := l.keys
	l.raise(n - 10)
	small[dedupKey{8, 8, 8}] = memEntry{}
	if _, ok := l.keys[dedupKey{8, 8, 8}]; !ok || len(l.keys) != 11 {
		t.Fatalf("a small level was copied (%d keys)", len(l.keys))
	}
}

// TestDedupFilterSavedAtClose: a graceful stop saves the filter, and the
// next start uses it at once, built by no one; retries still get their
// first seqs. A start after another process appended does not use it.
func TestDedupFilterSavedAtClose(t *testing.T) {
	buildFilters = false
	t.Cleanup(func() { buildFilters = true })
	ctx := context.Background()
	db, path := openTest(t, Options{})
	if err := db.CreateGroup(ctx, "h", "h", "u1", nil); err != nil {
		t.Fatal(err)
	}
	seqs := sendTexts(t, db, "g", 20)
	if err := db.buildFilter(ctx); err != nil {
		t.Fatal(err)
	}
	// The close moves the 20 keys to dedup_1 (the filter learns them).
	db = reopen(t, db, path)
	f := db.w.filters.ready.Load()
	if f == nil {
		t.Fatal("the filter saved at close is not in use after the next open")
	}
	var conv, user int64
	if err := db.readers.QueryRow(`SELECT (SELECT key FROM ids WHERE id = 'g'), (SELECT key FROM ids WHERE id = 'u1')`).Scan(&conv, &user); err != nil {
		t.Fatal(err)
	}
	for id := range seqs {
		if !f.mayHave(dedupKey{conv, user, cmidHash(id)}) {
			t.Fatalf("the loaded filter lacks %s", id)
		}
	}
	retryTexts(t, db, "g", seqs)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// Another process appends after this one saved its filter: the next
	// start must not trust it.
	other, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	moveMemAtClose = false // the other process is killed: no move, no save
	t.Cleanup(func() { moveMemAtClose = true })
	if _, _, err := other.Append(ctx, chat.Message{Conv: "h", From: "u1", ClientMsgID: "x", Kind: chat.KindText, Body: "x"})(); err != nil {
		t.Fatal(err)
	}
	other.Close()
	db, err = Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if db.w.filters.ready.Load() != nil {
		t.Fatal("a saved filter is in use although a message was appended after it was saved")
	}
}
