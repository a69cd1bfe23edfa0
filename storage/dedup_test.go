package storage

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/imserver/imserver/chat"
)

// smallLevels makes the dedup levels tiny and the job quick until the
// test ends.
func smallLevels(t *testing.T) {
	limits, chunk, tick := dedupLimits, dedupChunk, dedupTick
	dedupLimits, dedupChunk, dedupTick = [dedupLevels - 1]int64{5, 20}, 3, time.Millisecond
	t.Cleanup(func() { dedupLimits, dedupChunk, dedupTick = limits, chunk, tick })
}

// levelSizes returns how many entries each dedup level holds, and how many
// keys are in more than one.
func levelSizes(t *testing.T, db *DB) (sizes [dedupLevels]int, twice int) {
	t.Helper()
	for k := range dedupLevels {
		if err := db.readers.QueryRow(fmt.Sprintf(`SELECT COUNT(*) FROM dedup_%d`, k)).Scan(&sizes[k]); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.readers.QueryRow(`SELECT COUNT(*) FROM (SELECT conv, sender, cmid_hash FROM
		(SELECT * FROM dedup_0 UNION ALL SELECT * FROM dedup_1 UNION ALL SELECT * FROM dedup_2) GROUP BY 1, 2, 3 HAVING COUNT(*) > 1)`).Scan(&twice); err != nil {
		t.Fatal(err)
	}
	return sizes, twice
}

// waitLevels waits until ok holds for the level sizes.
func waitLevels(t *testing.T, db *DB, ok func([dedupLevels]int) bool) [dedupLevels]int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, twice := levelSizes(t, db)
		if twice != 0 {
			t.Fatalf("%d keys in two levels", twice)
		}
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("dedup levels %v", s)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestDedupLevels: the job moves full levels down, in key order, every key
// in one level; a retry of a message whose key is in any level gets the
// first result (PROTOCOL guarantee 3), texts and mutations alike; a new
// client_msg_id gets a new seq; retention takes the entries of the
// messages it deletes.
func TestDedupLevels(t *testing.T) {
	smallLevels(t)
	ctx := context.Background()
	db, err := Open(ctx, filepath.Join(t.TempDir(), "d.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, g := range []string{"g0", "g1"} {
		if err := db.CreateGroup(ctx, g, g, "u0", []string{"u1"}); err != nil {
			t.Fatal(err)
		}
	}
	type sent struct {
		m    chat.Message
		kind string
	}
	var all []sent
	send := func(i int) {
		conv, from := fmt.Sprint("g", i%2), fmt.Sprint("u", (i/2)%2)
		m := chat.Message{Conv: conv, From: from, ClientMsgID: fmt.Sprint("c", i), Kind: chat.KindText, Body: fmt.Sprint("message ", i)}
		if i%7 == 6 {
			on := true
			m = chat.Message{Conv: conv, From: from, ClientMsgID: fmt.Sprint("c", i), Kind: chat.KindReaction, Target: 1, Emoji: fmt.Sprint("e", i), On: &on}
		}
		got, dup, err := db.Append(ctx, m)()
		if err != nil || dup {
			t.Fatalf("send %d: %+v dup %v %v", i, got, dup, err)
		}
		all = append(all, sent{got, m.Kind})
	}
	for i := range 60 {
		send(i)
	}
	// 60 entries: past both small limits, so some reach the last level.
	s := waitLevels(t, db, func(s [dedupLevels]int) bool { return s[2] > 0 && s[0] < 5 && s[0]+s[1]+s[2] == 60 })
	t.Logf("levels after 60 sends: %v, moved %d", s, db.compactor.moved.Load())
	for i := range 20 {
		send(60 + i)
	}
	for _, a := range all {
		m := chat.Message{Conv: a.m.Conv, From: a.m.From, ClientMsgID: a.m.ClientMsgID, Kind: chat.KindText, Body: "again"}
		got, dup, err := db.Append(ctx, m)()
		if err != nil || !dup || got.Seq != a.m.Seq || got.Kind != a.kind {
			t.Fatalf("retry of %s: %+v dup %v %v, want seq %d", a.m.ClientMsgID, got, dup, err, a.m.Seq)
		}
	}
	// The same client_msg_id from the other sender, or in the other
	// conversation, is another message.
	got, dup, err := db.Append(ctx, chat.Message{Conv: "g0", From: "u1", ClientMsgID: "c0", Kind: chat.KindText, Body: "x"})()
	if err != nil || dup || got.Seq != 41 {
		t.Fatalf("c0 from u1 in g0: %+v dup %v %v, want seq 41", got, dup, err)
	}
	waitLevels(t, db, func(s [dedupLevels]int) bool { return s[0] < 5 && s[0]+s[1]+s[2] == 81 })
	// A mutation the store refuses (a reaction that changes nothing) was
	// stored and claimed its slot before the check: both are given back,
	// so a retry is refused again, not answered as a duplicate.
	on := true
	refused := chat.Message{Conv: "g0", From: "u1", ClientMsgID: "refused", Kind: chat.KindReaction, Target: 1, Emoji: "e6", On: &on}
	for range 2 {
		if got, dup, err := db.Append(ctx, refused)(); chat.ErrorCode(err) != chat.EConflict || dup {
			t.Fatalf("a reaction that changes nothing: %+v dup %v %v, want a conflict", got, dup, err)
		}
	}
	if s, _ := levelSizes(t, db); s[0]+s[1]+s[2] != 81 {
		t.Fatalf("after a refused reaction the levels hold %v, want 81 entries", s)
	}
	var key int64
	if err := db.readers.QueryRow(`SELECT key FROM ids WHERE id = 'g0'`).Scan(&key); err != nil {
		t.Fatal(err)
	}
	if err := db.w.exec(ctx, func(t *wtx) error { return dedupForget(t, key, 1<<40) }); err != nil {
		t.Fatal(err)
	}
	s, _ = levelSizes(t, db)
	if s[0]+s[1]+s[2] != 40 {
		t.Fatalf("after forgetting g0's messages the levels hold %v, want g1's 40", s)
	}
	if r, err := db.IntegrityCheck(); err != nil || r != "ok" {
		t.Fatalf("integrity_check: %q %v", r, err)
	}
}

// TestDedupCollisionAcrossLevels: client_msg_ids sharing a hash take the
// next slots even when the taken ones were moved to other levels, each
// retry finds its own message, and a fifth is refused.
func TestDedupCollisionAcrossLevels(t *testing.T) {
	smallLevels(t)
	collide(t)
	ctx := context.Background()
	db, err := Open(ctx, filepath.Join(t.TempDir(), "d.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.CreateGroup(ctx, "g0", "g0", "u0", nil); err != nil {
		t.Fatal(err)
	}
	// Other senders' entries fill the levels so that the colliding ones
	// move down between their sends.
	filler := 0
	fill := func() {
		for range 25 {
			if _, err := db.AddMembers(ctx, "g0", []string{fmt.Sprint("f", filler)}); err != nil {
				t.Fatal(err)
			}
			if _, _, err := db.Append(ctx, chat.Message{Conv: "g0", From: fmt.Sprint("f", filler), ClientMsgID: "x", Kind: chat.KindText, Body: "f"})(); err != nil {
				t.Fatal(err)
			}
			filler++
		}
		waitLevels(t, db, func(s [dedupLevels]int) bool { return s[0] < 5 && s[1] < 20 })
	}
	var seqs []int64
	for i := range 4 {
		fill()
		m, dup, err := db.Append(ctx, chat.Message{Conv: "g0", From: "u0", ClientMsgID: fmt.Sprint("same-hash-", i), Kind: chat.KindText, Body: "b"})()
		if err != nil || dup {
			t.Fatalf("colliding message %d: %+v dup %v %v", i, m, dup, err)
		}
		seqs = append(seqs, m.Seq)
	}
	fill()
	for i, seq := range seqs {
		m, dup, err := db.Append(ctx, chat.Message{Conv: "g0", From: "u0", ClientMsgID: fmt.Sprint("same-hash-", i), Kind: chat.KindText, Body: "again"})()
		if err != nil || !dup || m.Seq != seq {
			t.Fatalf("retry of colliding message %d: %+v dup %v %v, want seq %d", i, m, dup, err, seq)
		}
	}
	_, _, err = db.Append(ctx, chat.Message{Conv: "g0", From: "u0", ClientMsgID: "fifth", Kind: chat.KindText, Body: "x"})()
	if err == nil || !strings.Contains(err.Error(), "share the hash") {
		t.Fatalf("a fifth colliding client_msg_id: %v, want a refusal", err)
	}
}

// TestDedupCollisionAfterRetention: of two client_msg_ids sharing a hash,
// retention deletes the first (its slot is given back) but not the second,
// stored in the next slot; a retry of the second still gets its first seq
// (PROTOCOL guarantee 3), a text and a mutation alike, and a new
// client_msg_id with that hash is still stored.
func TestDedupCollisionAfterRetention(t *testing.T) {
	collide(t)
	ctx := context.Background()
	stamps := []int64{100, 5000, 6000}
	var i atomic.Int64
	db, _ := openTest(t, Options{Clock: func() int64 {
		n := i.Add(1) - 1
		return stamps[min(n, int64(len(stamps)-1))]
	}})
	if err := db.CreateGroup(ctx, "g", "g", "u1", nil); err != nil {
		t.Fatal(err)
	}
	old, _, err := db.Append(ctx, chat.Message{Conv: "g", From: "u1", ClientMsgID: "old", Kind: chat.KindText, Body: "x"})()
	if err != nil {
		t.Fatal(err)
	}
	kept, _, err := db.Append(ctx, chat.Message{Conv: "g", From: "u1", ClientMsgID: "kept", Kind: chat.KindText, Body: "y"})()
	if err != nil {
		t.Fatal(err)
	}
	on := true
	react, _, err := db.Append(ctx, chat.Message{Conv: "g", From: "u1", ClientMsgID: "react", Kind: chat.KindReaction, Target: kept.Seq, Emoji: "e", On: &on})()
	if err != nil {
		t.Fatal(err)
	}
	if n, err := db.DeleteBefore(ctx, time.UnixMilli(1000)); err != nil || n != 1 {
		t.Fatalf("retention deleted %d (%v), want message %d alone", n, err, old.Seq)
	}
	got, dup, err := db.Append(ctx, chat.Message{Conv: "g", From: "u1", ClientMsgID: "kept", Kind: chat.KindText, Body: "again"})()
	if err != nil || !dup || got.Seq != kept.Seq {
		t.Fatalf("retry of the kept message: %+v dup %v %v, want seq %d", got, dup, err, kept.Seq)
	}
	got, dup, err = db.Append(ctx, chat.Message{Conv: "g", From: "u1", ClientMsgID: "react", Kind: chat.KindReaction, Target: kept.Seq, Emoji: "e", On: &on})()
	if err != nil || !dup || got.Seq != react.Seq {
		t.Fatalf("retry of the reaction: %+v dup %v %v, want seq %d", got, dup, err, react.Seq)
	}
	got, dup, err = db.Append(ctx, chat.Message{Conv: "g", From: "u1", ClientMsgID: "new", Kind: chat.KindText, Body: "z"})()
	if err != nil || dup || got.Seq != react.Seq+1 {
		t.Fatalf("a new client_msg_id with the hash: %+v dup %v %v, want seq %d", got, dup, err, react.Seq+1)
	}
}
