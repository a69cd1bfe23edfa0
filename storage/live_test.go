package storage

import (
	"context"
	"testing"
	"time"

	"github.com/imserver/imserver/chat"
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
	db, now := openGroup(t)
	seqs := texts(t, db, 3)
	if got := db.w.live.count(); got != 3 {
		t.Fatalf("%d texts known live after 3 sends, want 3", got)
	}
	react := func(id string, target int64) error { return try(db, reactMsg("v", id, target)) }
	if err := react("r1", seqs[0]); err != nil {
		t.Fatal(err)
	}
	// A delete and a reaction to its target in one batch: the reaction
	// is refused as deleted.
	del := db.Append(ctx, deleteMsg("u", "d1", seqs[1]))
	r2 := db.Append(ctx, reactMsg("v", "r2", seqs[1]))
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
	a, b := openShared(t)
	if err := a.CreateGroup(ctx, "g", "g", "u", []string{"v"}); err != nil {
		t.Fatal(err)
	}
	seqs := texts(t, a, 2)
	if !a.w.live.has(keyOf(t, a, "g"), seqs[0]) {
		t.Fatal("a's own text is not known live to it")
	}
	send(t, b, deleteMsg("u", "del", seqs[0]))
	if err := try(a, reactMsg("v", "r", seqs[0])); chat.ErrorCode(err) != chat.EConflict {
		t.Fatalf("reaction in a to a message b deleted: %v, want conflict", err)
	}
	var n int
	if err := a.readers.QueryRow(`SELECT COUNT(*) FROM reactions`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d reactions stored (%v), want 0", n, err)
	}
	// The other one's text is not in a's set, and a reaction to it is
	// checked against its row.
	seq := send(t, b, textMsg("u", "b1"))
	if a.w.live.has(keyOf(t, a, "g"), seq) {
		t.Fatal("b's text is known live to a")
	}
	if err := try(a, reactMsg("v", "r2", seq)); err != nil {
		t.Fatalf("reaction in a to b's text: %v", err)
	}
}

// TestLiveTextsGoneInTheirTransaction: a text appended and then deleted, or
// removed by retention, in the same transaction is not live after it.
func TestLiveTextsGoneInTheirTransaction(t *testing.T) {
	ctx := context.Background()
	db, now := openGroup(t)
	texts(t, db, 1)
	// hold runs a function job that waits: what is queued meanwhile
	// joins its transaction.
	hold := func() (release func()) {
		started, block := make(chan struct{}), make(chan struct{})
		go db.w.exec(ctx, func(*wtx) error { close(started); <-block; return nil })
		<-started
		return func() { close(block) }
	}
	release := hold()
	text := db.Append(ctx, textMsg("u", "x"))
	del := db.Append(ctx, deleteMsg("u", "xd", 2))
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
	if err := try(db, reactMsg("v", "r1", 2)); chat.ErrorCode(err) != chat.EConflict {
		t.Fatalf("reaction to the deleted text: %v, want conflict", err)
	}

	release = hold()
	text = db.Append(ctx, textMsg("u", "y"))
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
	if err := try(db, reactMsg("v", "r2", m.Seq)); chat.ErrorCode(err) != chat.ENotFound {
		t.Fatalf("reaction to the text retention removed: %v, want not_found", err)
	}
}
