package storage

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/imserver/imserver/chat"
	"github.com/imserver/imserver/internal/redistest"
)

func TestLiveTextsWindow(t *testing.T) {
	l := newLiveTexts()
	for _, s := range []int64{5, 6, 70, 200} {
		l.add(1, s)
	}
	l.add(2, 6)
	for _, c := range []struct {
		conv, seq int64
		want      bool
	}{{1, 5, true}, {1, 6, true}, {1, 7, false}, {1, 70, true}, {1, 200, true}, {1, 201, false}, {1, 4, false}, {2, 6, true}, {2, 5, false}, {3, 6, false}} {
		if got := l.has(c.conv, c.seq); got != c.want {
			t.Errorf("has(%d, %d) = %v, want %v", c.conv, c.seq, got, c.want)
		}
	}
	l.forget(1, 70)
	l.forget(1, 99999) // beyond the window: nothing to clear
	l.forget(9, 1)     // an unknown conversation
	if l.has(1, 70) || !l.has(1, 200) {
		t.Fatal("forget(1, 70) cleared the wrong bits")
	}
	// A seq past the window slides it: the oldest seqs leave it.
	far := int64(5 + 64*liveConvWords + 10)
	l.add(1, far)
	if !l.has(1, far) || l.has(1, 5) || l.has(1, 6) || !l.has(1, 200) {
		t.Fatalf("after the slide: far %v, 5 %v, 6 %v, 200 %v", l.has(1, far), l.has(1, 5), l.has(1, 6), l.has(1, 200))
	}
	if got := l.words; got != liveConvWords+1 {
		t.Fatalf("%d words held, want %d (conversation 1's window and 2's word)", got, liveConvWords+1)
	}
	// A jump of more than the window leaves only the new seq.
	l.add(1, far+10*64*liveConvWords)
	if l.count() != 2 || l.has(1, far) {
		t.Fatalf("after a long jump %d seqs live, far %v; want 2 (the new one and 2's)", l.count(), l.has(1, far))
	}
	// Past the bound on all words the set starts over.
	for c := range int64(liveWords/liveConvWords + 1) {
		l.add(100+c, 64*liveConvWords-1)
	}
	if l.words > liveWords {
		t.Fatalf("%d words held, bound %d", l.words, liveWords)
	}
}

// TestLiveTextsAnswerReactions: a reaction to a text the writer appended
// is checked without reading the target; what makes the answer wrong (a
// delete in the same batch, retention) sends the check back to the row,
// with its exact refusal.
func TestLiveTextsAnswerReactions(t *testing.T) {
	ctx := context.Background()
	var now atomic.Int64
	db, _ := openTest(t, Options{Clock: func() int64 { return now.Add(1) }})
	if err := db.CreateGroup(ctx, "g", "g", "u", []string{"v"}); err != nil {
		t.Fatal(err)
	}
	seqs := liveSends(t, db, "g", 3)
	if got := db.w.live.count(); got != 3 {
		t.Fatalf("%d texts known live after 3 sends, want 3", got)
	}
	on := true
	react := func(id string, target int64) error {
		_, _, err := db.Append(ctx, chat.Message{Conv: "g", From: "v", ClientMsgID: id, Kind: chat.KindReaction, Target: target, Emoji: "+1", On: &on})()
		return err
	}
	if err := react("r1", seqs[0]); err != nil {
		t.Fatal(err)
	}
	// A delete and a reaction to its target in one batch: the reaction
	// is refused as deleted.
	del := db.Append(ctx, chat.Message{Conv: "g", From: "u", ClientMsgID: "d1", Kind: chat.KindDelete, Target: seqs[1]})
	r2 := db.Append(ctx, chat.Message{Conv: "g", From: "v", ClientMsgID: "r2", Kind: chat.KindReaction, Target: seqs[1], Emoji: "+1", On: &on})
	if _, _, err := del(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r2(); chat.ErrorCode(err) != chat.EConflict {
		t.Fatalf("reaction to a message deleted before it: %v, want conflict", err)
	}
	if db.w.live.has(keyOf(t, db, "g"), seqs[1]) {
		t.Fatal("the deleted message is still known live")
	}
	// A seq never stored, and a reaction (not a text), are still refused.
	if err := react("r3", seqs[2]+100); chat.ErrorCode(err) != chat.ENotFound {
		t.Fatalf("reaction to a seq never stored: %v, want not_found", err)
	}
	// A membership change keeps the set; retention, which removes
	// messages, empties it, and a reaction to a removed one is refused.
	if _, err := db.AddMembers(ctx, "g", []string{"w"}); err != nil {
		t.Fatal(err)
	}
	if !db.w.live.has(keyOf(t, db, "g"), seqs[2]) {
		t.Fatal("a membership change emptied the live set")
	}
	if n, err := db.DeleteBefore(ctx, time.UnixMilli(now.Load()+1)); err != nil || n == 0 {
		t.Fatalf("retention deleted %d (%v)", n, err)
	}
	if got := db.w.live.count(); got != 0 {
		t.Fatalf("%d texts known live after retention deleted them, want 0", got)
	}
	if err := react("r4", seqs[2]); chat.ErrorCode(err) != chat.ENotFound {
		t.Fatalf("reaction to a message retention deleted: %v, want not_found", err)
	}
}

// TestLiveTextsOtherProcess: two processes on one file (seqs from Redis).
// A delete made by the other one reaches this writer's set before its next
// check, so a reaction to the deleted message is refused.
func TestLiveTextsOtherProcess(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Client(t)
	path := filepath.Join(t.TempDir(), "two.db")
	open := func() *DB {
		db, err := Open(ctx, path, Options{Redis: rdb, RedisPrefix: "live"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	a, b := open(), open()
	if err := a.CreateGroup(ctx, "g", "g", "u", []string{"v"}); err != nil {
		t.Fatal(err)
	}
	seqs := liveSends(t, a, "g", 2)
	if !a.w.live.has(keyOf(t, a, "g"), seqs[0]) {
		t.Fatal("a's own text is not known live to it")
	}
	if _, _, err := b.Append(ctx, chat.Message{Conv: "g", From: "u", ClientMsgID: "del", Kind: chat.KindDelete, Target: seqs[0]})(); err != nil {
		t.Fatal(err)
	}
	on := true
	_, _, err := a.Append(ctx, chat.Message{Conv: "g", From: "v", ClientMsgID: "r", Kind: chat.KindReaction, Target: seqs[0], Emoji: "+1", On: &on})()
	if chat.ErrorCode(err) != chat.EConflict {
		t.Fatalf("reaction in a to a message b deleted: %v, want conflict", err)
	}
	var n int
	if err := a.readers.QueryRow(`SELECT COUNT(*) FROM reactions`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d reactions stored (%v), want 0", n, err)
	}
	// The other one's text is not in a's set, and a reaction to it is
	// checked against its row.
	m, _, err := b.Append(ctx, chat.Message{Conv: "g", From: "u", ClientMsgID: "b1", Kind: chat.KindText, Body: "from b"})()
	if err != nil {
		t.Fatal(err)
	}
	if a.w.live.has(keyOf(t, a, "g"), m.Seq) {
		t.Fatal("b's text is known live to a")
	}
	if _, _, err := a.Append(ctx, chat.Message{Conv: "g", From: "v", ClientMsgID: "r2", Kind: chat.KindReaction, Target: m.Seq, Emoji: "+1", On: &on})(); err != nil {
		t.Fatalf("reaction in a to b's text: %v", err)
	}
}

// liveSends appends n texts from u to conv and returns their seqs.
func liveSends(t *testing.T, db *DB, conv string, n int) []int64 {
	t.Helper()
	var seqs []int64
	for i := range n {
		m, _, err := db.Append(context.Background(), chat.Message{Conv: conv, From: "u", ClientMsgID: fmt.Sprint("t", i), Kind: chat.KindText, Body: fmt.Sprint("text ", i)})()
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, m.Seq)
	}
	return seqs
}

// keyOf returns the integer key of the conversation id.
func keyOf(t *testing.T, db *DB, id string) int64 {
	t.Helper()
	var k int64
	if err := db.readers.QueryRow(`SELECT key FROM ids WHERE id = ?`, id).Scan(&k); err != nil {
		t.Fatal(err)
	}
	return k
}

// TestLiveTextsGoneInTheirTransaction: a text appended and then deleted, or
// removed by retention, in the same transaction is not live after it.
func TestLiveTextsGoneInTheirTransaction(t *testing.T) {
	ctx := context.Background()
	var now atomic.Int64
	db, _ := openTest(t, Options{Clock: func() int64 { return now.Add(1) }})
	if err := db.CreateGroup(ctx, "g", "g", "u", []string{"v"}); err != nil {
		t.Fatal(err)
	}
	liveSends(t, db, "g", 1)
	// hold runs a function job that waits: what is queued meanwhile
	// joins its transaction.
	hold := func() (release func()) {
		started, block := make(chan struct{}), make(chan struct{})
		go db.w.exec(ctx, func(*wtx) error { close(started); <-block; return nil })
		<-started
		return func() { close(block) }
	}
	on := true
	release := hold()
	text := db.Append(ctx, chat.Message{Conv: "g", From: "u", ClientMsgID: "x", Kind: chat.KindText, Body: "gone at once"})
	del := db.Append(ctx, chat.Message{Conv: "g", From: "u", ClientMsgID: "xd", Kind: chat.KindDelete, Target: 2})
	release()
	if m, _, err := text(); err != nil || m.Seq != 2 {
		t.Fatalf("text: seq %d, %v; want 2", m.Seq, err)
	}
	if _, _, err := del(); err != nil {
		t.Fatal(err)
	}
	if db.w.live.has(keyOf(t, db, "g"), 2) {
		t.Fatal("a text deleted in its own transaction is known live")
	}
	_, _, err := db.Append(ctx, chat.Message{Conv: "g", From: "v", ClientMsgID: "r1", Kind: chat.KindReaction, Target: 2, Emoji: "+1", On: &on})()
	if chat.ErrorCode(err) != chat.EConflict {
		t.Fatalf("reaction to the deleted text: %v, want conflict", err)
	}

	release = hold()
	text = db.Append(ctx, chat.Message{Conv: "g", From: "u", ClientMsgID: "y", Kind: chat.KindText, Body: "retained briefly"})
	done := make(chan error, 1)
	go func() {
		_, err := db.DeleteBefore(ctx, time.UnixMilli(now.Load()+1000))
		done <- err
	}()
	time.Sleep(50 * time.Millisecond) // retention's job queues behind the text
	release()
	m, _, err := text()
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if db.w.live.count() != 0 {
		t.Fatalf("%d texts known live after retention removed them all", db.w.live.count())
	}
	_, _, err = db.Append(ctx, chat.Message{Conv: "g", From: "v", ClientMsgID: "r2", Kind: chat.KindReaction, Target: m.Seq, Emoji: "+1", On: &on})()
	if chat.ErrorCode(err) != chat.ENotFound {
		t.Fatalf("reaction to the text retention removed: %v, want not_found", err)
	}
}
