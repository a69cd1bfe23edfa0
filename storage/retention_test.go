package storage

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/imserver/imserver/chat"
)

// TestDeleteBefore: messages stamped before the cutoff go, in batches
// smaller than a conversation's history; those inside the window stay;
// seqs, max_seq and the pages keep their meaning: a pull from 0 starts
// above the gap and says completed, and new messages continue the seqs.
func TestDeleteBefore(t *testing.T) {
	ctx := context.Background()
	var now atomic.Int64
	now.Store(1_000_000)
	db, _ := openTest(t, Options{Clock: func() int64 { return now.Add(1) }, RetentionBatch: 7})
	for _, g := range []string{"g1", "g2"} {
		if err := db.CreateGroup(ctx, g, g, "u1", []string{"u2"}); err != nil {
			t.Fatal(err)
		}
	}
	send := func(conv string, n int) {
		t.Helper()
		body := "ancient words"
		if now.Load() >= 2_000_000 {
			body = "recent words"
		}
		for i := range n {
			if _, _, err := db.Append(ctx, chat.Message{Conv: conv, From: "u1", ClientMsgID: fmt.Sprint(conv, now.Load(), i), Kind: "text", Body: body})(); err != nil {
				t.Fatal(err)
			}
		}
	}
	send("g1", 30) // ts 1_000_001..1_000_030
	send("g2", 5)  // ts ..035
	now.Store(2_000_000)
	send("g1", 10) // seqs 31..40, ts 2_000_001..
	cutoff := time.UnixMilli(1_500_000)
	n, err := db.DeleteBefore(ctx, cutoff)
	if err != nil {
		t.Fatal(err)
	}
	if n != 35 {
		t.Fatalf("deleted %d, want 35", n)
	}
	page, err := db.Messages(ctx, "g1", "u2", chat.PageQuery{After: 0, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Messages) != 10 || page.Messages[0].Seq != 31 || !page.Completed || page.MaxSeq != 40 {
		t.Fatalf("g1 after retention: %d messages from seq %v, completed %v, max_seq %d; want 10 from 31, completed, 40",
			len(page.Messages), page.Messages, page.Completed, page.MaxSeq)
	}
	// Paging across the gap: a page of 4 from seq 5 is 31..34, not completed.
	page, err = db.Messages(ctx, "g1", "u2", chat.PageQuery{After: 5, Limit: 4})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Messages) != 4 || page.Messages[0].Seq != 31 || page.Completed {
		t.Fatalf("page after 5: %+v completed %v", page.Messages, page.Completed)
	}
	page, err = db.Messages(ctx, "g2", "u2", chat.PageQuery{After: 0, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Messages) != 0 || !page.Completed || page.MaxSeq != 5 {
		t.Fatalf("g2 emptied: %d messages, completed %v, max_seq %d", len(page.Messages), page.Completed, page.MaxSeq)
	}
	// The seqs go on from max_seq, never reusing a deleted one.
	m, _, err := db.Append(ctx, chat.Message{Conv: "g2", From: "u1", ClientMsgID: "after", Kind: "text", Body: "y"})()
	if err != nil {
		t.Fatal(err)
	}
	if m.Seq != 6 {
		t.Fatalf("seq after retention %d, want 6", m.Seq)
	}
	// The search index let go of the deleted bodies: a word only they held
	// finds nothing, one of the kept messages is still found.
	for word, want := range map[string]int{"ancient": 0, "recent": 1} {
		res, err := db.Search(ctx, "u2", chat.SearchQuery{Match: `"` + word + `"`, Terms: []string{word}, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Results) < want || (want == 0 && len(res.Results) != 0) {
			t.Fatalf("search %q after retention: %d hits, want %d", word, len(res.Results), want)
		}
	}
	// ...and holds no entry of them: the FTS index counts the kept bodies
	// only.
	var fts int
	if err := db.readers.QueryRowContext(ctx, `SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH 'words'`).Scan(&fts); err != nil {
		t.Fatal(err)
	}
	if fts != 10 { // 10 kept in g1 (g2's message sent after the pass has other words)
		t.Fatalf("after retention: %d index entries, want 10", fts)
	}
	// A second pass finds nothing more to delete.
	if n, err := db.DeleteBefore(ctx, cutoff); err != nil || n != 0 {
		t.Fatalf("second pass: %d, %v", n, err)
	}
}

// TestDeleteBeforeStopsAtNewerMessage: a conversation is cut only up to its
// first message inside the window, even if older stamps follow (a clock
// that stepped back): nothing inside the window is ever deleted.
func TestDeleteBeforeStopsAtNewerMessage(t *testing.T) {
	ctx := context.Background()
	stamps := []int64{100, 200, 5000, 300, 6000}
	var i atomic.Int64
	db, _ := openTest(t, Options{Clock: func() int64 { return stamps[i.Add(1)-1] }})
	if err := db.CreateGroup(ctx, "g", "g", "u1", nil); err != nil {
		t.Fatal(err)
	}
	for k := range stamps {
		if _, _, err := db.Append(ctx, chat.Message{Conv: "g", From: "u1", ClientMsgID: fmt.Sprint(k), Kind: "text", Body: "x"})(); err != nil {
			t.Fatal(err)
		}
	}
	n, err := db.DeleteBefore(ctx, time.UnixMilli(1000))
	if err != nil || n != 2 {
		t.Fatalf("deleted %d (%v), want 2", n, err)
	}
	page, err := db.Messages(ctx, "g", "u1", chat.PageQuery{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Messages) != 3 || page.Messages[0].Seq != 3 {
		t.Fatalf("left %+v, want seqs 3..5", page.Messages)
	}
}

// TestRetentionJob: with Options.Retention the background job deletes what
// falls out of the window while sends go on, and stops with Close.
func TestRetentionJob(t *testing.T) {
	ctx := context.Background()
	db, _ := openTest(t, Options{Retention: 300 * time.Millisecond, RetentionEvery: 20 * time.Millisecond, RetentionBatch: 3})
	if err := db.CreateGroup(ctx, "g", "g", "u1", nil); err != nil {
		t.Fatal(err)
	}
	for k := range 10 {
		if _, _, err := db.Append(ctx, chat.Message{Conv: "g", From: "u1", ClientMsgID: fmt.Sprint(k), Kind: "text", Body: "old"})(); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for k := 10; ; k++ {
		if _, _, err := db.Append(ctx, chat.Message{Conv: "g", From: "u1", ClientMsgID: fmt.Sprint(k), Kind: "text", Body: "new"})(); err != nil {
			t.Fatal(err)
		}
		page, err := db.Messages(ctx, "g", "u1", chat.PageQuery{Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Messages) == 1 && page.Messages[0].Seq > 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the old messages are still there: first %+v", page.Messages)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestVacuum: a database open in another connection is refused with
// ErrInUse; once closed, deleted messages' pages are given back.
func TestVacuum(t *testing.T) {
	ctx := context.Background()
	var now atomic.Int64
	db, path := openTest(t, Options{Clock: func() int64 { return now.Add(1) }})
	if err := db.CreateGroup(ctx, "g", "g", "u1", nil); err != nil {
		t.Fatal(err)
	}
	var pend []chat.Pending
	for k := range 5000 {
		pend = append(pend, db.Append(ctx, chat.Message{Conv: "g", From: "u1", ClientMsgID: fmt.Sprint(k), Kind: "text", Body: fmt.Sprintf("%0200d", k)}))
	}
	for _, p := range pend {
		if _, _, err := p(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Vacuum(ctx, path); !errors.Is(err, ErrInUse) {
		t.Fatalf("vacuum beside an open store: %v, want ErrInUse", err)
	}
	if n, err := db.DeleteBefore(ctx, time.UnixMilli(now.Load()-10)); err != nil || n < 4900 {
		t.Fatalf("deleted %d, %v", n, err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	res, err := Vacuum(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if res.After >= res.Before/2 {
		t.Fatalf("vacuum: %d -> %d bytes, want less than half", res.Before, res.After)
	}
	db2, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	page, err := db2.Messages(ctx, "g", "u1", chat.PageQuery{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Messages) == 0 || page.MaxSeq != 5000 {
		t.Fatalf("after vacuum: %d messages, max_seq %d", len(page.Messages), page.MaxSeq)
	}
	var ok string
	if err := db2.readers.QueryRowContext(ctx, "PRAGMA integrity_check").Scan(&ok); err != nil || ok != "ok" {
		t.Fatalf("integrity_check: %q %v", ok, err)
	}
}
