package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/imserver/imserver/chat"
	"github.com/imserver/imserver/internal/redistest"
)

// smallLevels makes the dedup levels tiny and the job quick until the
// test ends.
func smallLevels(t *testing.T) {
	limits, chunk, tick := dedupLimits, dedupChunk, dedupTick
	dedupLimits, dedupChunk, dedupTick = [dedupLevels - 1]int64{5, 20}, 3, time.Millisecond
	t.Cleanup(func() { dedupLimits, dedupChunk, dedupTick = limits, chunk, tick })
}

// levelSizes returns how many entries each dedup level holds (level 0
// is in memory), and how many keys are in more than one. A key is in two
// levels only while the job moves it out of memory (moveMem), in both
// with its seq.
func levelSizes(t *testing.T, db *DB) (sizes [dedupLevels]int, twice int) {
	t.Helper()
	// The level in memory is the writer's: read in one of its
	// transactions, the same as the levels on file.
	err := db.w.exec(context.Background(), func(tx *wtx) error {
		sizes[0] = len(db.w.mem.keys)
		for k := 1; k < dedupLevels; k++ {
			if err := tx.QueryRowContext(tx.ctx, fmt.Sprintf(`SELECT COUNT(*) FROM dedup_%d`, k)).Scan(&sizes[k]); err != nil {
				return err
			}
		}
		if err := tx.QueryRowContext(tx.ctx, `SELECT COUNT(*) FROM (SELECT conv, sender, cmid_hash FROM
			(SELECT * FROM dedup_1 UNION ALL SELECT * FROM dedup_2) GROUP BY 1, 2, 3 HAVING COUNT(*) > 1)`).Scan(&twice); err != nil {
			return err
		}
		for k, e := range db.w.mem.keys {
			var seq int64
			err := tx.QueryRowContext(tx.ctx, `SELECT seq FROM dedup_1 WHERE conv = ?1 AND sender = ?2 AND cmid_hash = ?3
				UNION ALL SELECT seq FROM dedup_2 WHERE conv = ?1 AND sender = ?2 AND cmid_hash = ?3`, k.conv, k.sender, k.hash).Scan(&seq)
			if errors.Is(err, sql.ErrNoRows) {
				continue
			} else if err != nil {
				return err
			}
			if seq != e.seq {
				return fmt.Errorf("key %v: seq %d in memory, %d on file", k, e.seq, seq)
			}
			sizes[0]--
		}
		return nil
	})
	if err != nil {
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

// TestDedupMemoryLevelReadBack: the level in memory is read back from the
// messages above the mark when the store opens again after a stop that
// left keys in it (as a kill does), so a retry gets the first seq; and message ids are never handed out twice,
// even after retention deleted the newest rows (the level's "rows above
// the last id seen" must not miss a new row that took an old id).
func TestDedupMemoryLevelReadBack(t *testing.T) {
	moveMemAtClose = false
	t.Cleanup(func() { moveMemAtClose = true })
	ctx := context.Background()
	stamps := []int64{100, 100, 100, 5000}
	var i atomic.Int64
	opts := Options{Clock: func() int64 {
		n := i.Add(1) - 1
		return stamps[min(n, int64(len(stamps)-1))]
	}}
	path := filepath.Join(t.TempDir(), "m.db")
	db, err := Open(ctx, path, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.CreateGroup(ctx, "g", "g", "u1", nil); err != nil {
		t.Fatal(err)
	}
	maxID := func(db *DB) (n int64) {
		t.Helper()
		if err := db.readers.QueryRow(`SELECT COALESCE(MAX(id), 0) FROM messages`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, id := range []string{"c1", "c2", "c3"} {
		if _, _, err := db.Append(ctx, chat.Message{Conv: "g", From: "u1", ClientMsgID: id, Kind: chat.KindText, Body: id})(); err != nil {
			t.Fatal(err)
		}
	}
	top := maxID(db)
	if n, err := db.DeleteBefore(ctx, time.UnixMilli(1000)); err != nil || n != 3 {
		t.Fatalf("retention deleted %d (%v), want 3", n, err)
	}
	kept, _, err := db.Append(ctx, chat.Message{Conv: "g", From: "u1", ClientMsgID: "kept", Kind: chat.KindText, Body: "k"})()
	if err != nil {
		t.Fatal(err)
	}
	if got := maxID(db); got <= top {
		t.Fatalf("a message stored after retention emptied the table has id %d, not above the %d handed out before", got, top)
	}
	if n := db.w.mem.size.Load(); n != 1 {
		t.Fatalf("the level in memory holds %d keys, want the new message's alone", n)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db, err = Open(ctx, path, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if n := db.w.mem.size.Load(); n != 1 {
		t.Fatalf("read back: the level in memory holds %d keys, want 1", n)
	}
	got, dup, err := db.Append(ctx, chat.Message{Conv: "g", From: "u1", ClientMsgID: "kept", Kind: chat.KindText, Body: "again"})()
	if err != nil || !dup || got.Seq != kept.Seq || got.Body != "k" {
		t.Fatalf("retry after reopening: %+v dup %v %v, want seq %d", got, dup, err, kept.Seq)
	}
	// The deleted messages' client_msg_ids are free again.
	got, dup, err = db.Append(ctx, chat.Message{Conv: "g", From: "u1", ClientMsgID: "c1", Kind: chat.KindText, Body: "c1 again"})()
	if err != nil || dup || got.Seq != kept.Seq+1 {
		t.Fatalf("c1 after retention: %+v dup %v %v, want a new message, seq %d", got, dup, err, kept.Seq+1)
	}
}

// TestMigration0011: a database at schema 10 whose newest dedup keys are
// in dedup_0 (as the schema-10 writer left them) is migrated: dedup_0's
// keys join dedup_1, dedup_0 is gone, every message is below the mark (the
// level in memory starts empty), retries of messages whose key was in
// either table get their first seq, and new messages take ids above the
// old ones.
func TestMigration0011(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v10.db")
	const msgs = 300
	if _, err := MakeSchemaForTest(path, 10, 2, 3, msgs); err != nil {
		t.Fatal(err)
	}
	// The schema-10 copy put every key in dedup_2; the newest 40 go to
	// dedup_0, where the schema-10 writer had them.
	raw, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO dedup_0 SELECT d.* FROM dedup_2 d JOIN messages m ON (m.conv, m.sender, m.cmid_hash) = (d.conv, d.sender, d.cmid_hash) WHERE m.id > ` + fmt.Sprint(msgs-40),
		`DELETE FROM dedup_2 WHERE (conv, sender, cmid_hash) IN (SELECT conv, sender, cmid_hash FROM dedup_0)`,
	} {
		if _, err := raw.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	var in0 int
	if err := raw.QueryRow(`SELECT COUNT(*) FROM dedup_0`).Scan(&in0); err != nil || in0 != 40 {
		t.Fatalf("dedup_0 holds %d keys (%v), want 40", in0, err)
	}
	raw.Close()

	db, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var tables, onFile, hi, mark int
	if err := db.readers.QueryRow(`SELECT (SELECT COUNT(*) FROM sqlite_master WHERE name = 'dedup_0'),
		(SELECT COUNT(*) FROM dedup_1) + (SELECT COUNT(*) FROM dedup_2),
		(SELECT value FROM counters WHERE name = 'messages_hi'), (SELECT value FROM counters WHERE name = 'dedup_mark')`).Scan(&tables, &onFile, &hi, &mark); err != nil {
		t.Fatal(err)
	}
	if tables != 0 || onFile != msgs || hi != msgs || mark != msgs {
		t.Fatalf("after 0011: dedup_0 tables %d, keys on file %d, messages_hi %d, dedup_mark %d; want 0, %d, %d, %d", tables, onFile, hi, mark, msgs, msgs, msgs)
	}
	if n := db.w.mem.size.Load(); n != 0 {
		t.Fatalf("the level in memory holds %d keys after the migration, want 0", n)
	}
	// Retries: message i is c<i> in g<i%3>, sent by [gone u0 u1][(i/3)%3]
	// (MakeSchema5ForTest); the gone sender has no account to retry with.
	for i := range msgs {
		from := []string{"gone", "u0", "u1"}[(i/3)%3]
		if from == "gone" {
			continue
		}
		cmid := fmt.Sprint("c", i)
		m, dup, err := db.Append(ctx, chat.Message{Conv: fmt.Sprint("g", i%3), From: from, ClientMsgID: cmid, Kind: chat.KindText, Body: "again"})()
		if err != nil || !dup || m.ClientMsgID != cmid || m.Body == "again" {
			t.Fatalf("retry of %s (key in dedup_%d before): %+v dup %v %v", cmid, map[bool]int{true: 0, false: 2}[i >= msgs-40], m, dup, err)
		}
	}
	m, dup, err := db.Append(ctx, chat.Message{Conv: "g0", From: "u0", ClientMsgID: "new", Kind: chat.KindText, Body: "new"})()
	if err != nil || dup {
		t.Fatalf("a new message: %+v dup %v %v", m, dup, err)
	}
	var id int64
	if err := db.readers.QueryRow(`SELECT id FROM messages WHERE client_msg_id = 'new'`).Scan(&id); err != nil || id != msgs+1 {
		t.Fatalf("the new message's id: %d (%v), want %d", id, err, msgs+1)
	}
}

// TestDedupLevelMovedAtClose: a store closed with keys in the level in
// memory moves them to the file first, so that the next open reads
// nothing back; retries still get their first seqs.
func TestDedupLevelMovedAtClose(t *testing.T) {
	db, path := openTest(t, Options{})
	seqs := sendTexts(t, db, "g", 50)
	if n := db.w.mem.size.Load(); n != 50 {
		t.Fatalf("the level in memory holds %d keys before the close, want 50", n)
	}
	db = reopen(t, db, path)
	if n := db.w.mem.size.Load(); n != 0 {
		t.Fatalf("the next open read back %d keys, want none", n)
	}
	retryTexts(t, db, "g", seqs)
}

// sendTexts creates group conv of u1 and appends texts c0 .. c<n-1> from
// u1 to it; it returns their seqs by client_msg_id.
func sendTexts(t *testing.T, db *DB, conv string, n int) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	if err := db.CreateGroup(ctx, conv, conv, "u1", nil); err != nil {
		t.Fatal(err)
	}
	seqs := map[string]int64{}
	for i := range n {
		id := fmt.Sprint("c", i)
		m, _, err := db.Append(ctx, chat.Message{Conv: conv, From: "u1", ClientMsgID: id, Kind: chat.KindText, Body: id})()
		if err != nil {
			t.Fatal(err)
		}
		seqs[id] = m.Seq
	}
	return seqs
}

// retryTexts sends every client_msg_id of seqs from u1 to conv again: each
// must be answered as a duplicate of its first seq (PROTOCOL guarantee 3).
func retryTexts(t *testing.T, db *DB, conv string, seqs map[string]int64) {
	t.Helper()
	for id, seq := range seqs {
		m, dup, err := db.Append(context.Background(), chat.Message{Conv: conv, From: "u1", ClientMsgID: id, Kind: chat.KindText, Body: "again"})()
		if err != nil || !dup || m.Seq != seq {
			t.Fatalf("retry of %s: %+v dup %v %v, want seq %d", id, m, dup, err, seq)
		}
	}
}

// reopen closes db and opens the store at path again, closed when the
// test ends.
func reopen(t *testing.T, db *DB, path string) *DB {
	t.Helper()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := Open(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestDedupMovesOfTwoProcesses: two stores on one file (two processes)
// both move their level in memory, one of them after the other's keys
// already went on to dedup_2; the moves out of dedup_1 still succeed, no
// key is left in two tables on file, and retries on either store get the
// first seqs.
func TestDedupMovesOfTwoProcesses(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "two.db")
	a, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// Each writes its own conversation: without Redis the seqs of a
	// conversation are one process's.
	if err := a.CreateGroup(ctx, "ga", "ga", "u1", nil); err != nil {
		t.Fatal(err)
	}
	if err := b.CreateGroup(ctx, "gb", "gb", "u1", nil); err != nil {
		t.Fatal(err)
	}
	seqs := map[string]int64{}
	send := func(db *DB, conv, id string) {
		t.Helper()
		m, dup, err := db.Append(ctx, chat.Message{Conv: conv, From: "u1", ClientMsgID: id, Kind: chat.KindText, Body: id})()
		if err != nil || dup {
			t.Fatalf("send %s: %+v dup %v %v", id, m, dup, err)
		}
		seqs[id] = m.Seq
	}
	for i := range 10 {
		send(a, "ga", fmt.Sprint("a", i))
	}
	send(b, "gb", "b0") // b takes in a's rows
	if err := a.compactor.moveMem(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := a.compactor.moveLevel1(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.compactor.moveMem(ctx, 0); err != nil {
		t.Fatal(err)
	}
	for _, db := range []*DB{b, a} {
		if err := db.compactor.moveLevel1(ctx); err != nil {
			t.Fatalf("moving dedup_1 to dedup_2 after both moved their level: %v", err)
		}
	}
	var twice int
	if err := a.readers.QueryRow(`SELECT COUNT(*) FROM dedup_1 JOIN dedup_2 USING (conv, sender, cmid_hash)`).Scan(&twice); err != nil || twice != 0 {
		t.Fatalf("%d keys in both dedup_1 and dedup_2 (%v)", twice, err)
	}
	for id, seq := range seqs {
		conv := map[byte]string{'a': "ga", 'b': "gb"}[id[0]]
		for _, db := range []*DB{a, b} {
			m, dup, err := db.Append(ctx, chat.Message{Conv: conv, From: "u1", ClientMsgID: id, Kind: chat.KindText, Body: "again"})()
			if err != nil || !dup || m.Seq != seq {
				t.Fatalf("retry of %s: %+v dup %v %v, want seq %d", id, m, dup, err, seq)
			}
		}
	}
}

// TestDedupLongBacklogMovedAtOpen: a start that finds more messages above
// the mark than it reads back into memory moves the oldest of them to
// dedup_1 first; retries of all of them still get their first seqs.
func TestDedupLongBacklogMovedAtOpen(t *testing.T) {
	moveMemAtClose, memReadBack = false, 4
	t.Cleanup(func() { moveMemAtClose, memReadBack = true, 1<<17 })
	db, path := openTest(t, Options{})
	seqs := sendTexts(t, db, "g", 11)
	db = reopen(t, db, path)
	// 11 above the mark: two moves of 4 leave 3 to read back.
	if n, mark := db.w.mem.size.Load(), db.w.mem.mark; n != 3 || mark != 8 {
		t.Fatalf("after the open: %d keys in memory, mark %d; want 3 and 8", n, mark)
	}
	retryTexts(t, db, "g", seqs)
}

// TestSettleDedupWaitsForTheJob: a store opened with dedup_1 far over its
// bound (what a bulk load leaves) has its job merge it into dedup_2;
// SettleDedup returns once dedup_1 is within its bound, every key kept.
func TestSettleDedupWaitsForTheJob(t *testing.T) {
	smallLevels(t)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "d.db")
	db, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	const backlog = 2000
	err = db.w.exec(ctx, func(tx *wtx) error {
		_, err := tx.ExecContext(tx.ctx, `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
			INSERT INTO dedup_1 (conv, sender, cmid_hash, seq) SELECT 1, 1, i, i FROM n`, backlog)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	db = reopen(t, db, path) // the job counts dedup_1 at start
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := db.SettleDedup(sctx); err != nil {
		t.Fatal(err)
	}
	sizes, twice := levelSizes(t, db)
	if sizes[1] >= int(dedupLimits[1]) || sizes[1]+sizes[2] != backlog || twice != 0 {
		t.Fatalf("after SettleDedup: levels %v (%d keys twice), want dedup_1 under %d and %d keys in all", sizes, twice, dedupLimits[1], backlog)
	}
}

// TestInsertKeys: keys go into dedup_1 many to a statement and the rest
// one by one; the count is of the keys that were not there yet, and a key
// already there keeps its seq.
func TestInsertKeys(t *testing.T) {
	db, _ := openTest(t, Options{})
	keys := make([]memKeyed, 3*moveRows+5)
	for i := range keys {
		keys[i] = memKeyed{k: dedupKey{1, 2, int64(i)}, e: memEntry{seq: int64(i) + 1}}
	}
	var first, second int64
	err := db.w.exec(context.Background(), func(t *wtx) error {
		var err error
		if first, err = insertKeys(t, keys[moveRows+1:2*moveRows+3]); err != nil {
			return err
		}
		again := append([]memKeyed(nil), keys...)
		again[moveRows+1].e.seq = 999 // there already: not replaced
		second, err = insertKeys(t, again)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if first != moveRows+2 || second != int64(len(keys))-first {
		t.Fatalf("inserted %d then %d, want %d then %d", first, second, moveRows+2, int64(len(keys))-first)
	}
	var n, sum int64
	if err := db.readers.QueryRow(`SELECT COUNT(*), SUM(seq) FROM dedup_1 WHERE conv = 1 AND sender = 2`).Scan(&n, &sum); err != nil {
		t.Fatal(err)
	}
	if want := int64(len(keys)); n != want || sum != want*(want+1)/2 {
		t.Fatalf("dedup_1 holds %d keys with seqs summing to %d, want %d and %d", n, sum, want, want*(want+1)/2)
	}
}

// TestDedupDisplacedKeyInMemory: while no key in the level in memory sits
// past the first slot of its hash, a claim looks up only that first slot
// there. A client_msg_id stored in the next slot (its hash shared with an
// older one that retention then deleted) must still be found by its retry:
// whether the level took it from this process's claim, from the messages
// read back at a start (a kill left it above the mark) or from another
// process sharing the file.
func TestDedupDisplacedKeyInMemory(t *testing.T) {
	old := cmidHash
	cmidHash = func(string) int64 { return 1000 } // one hash, far from wrapping
	t.Cleanup(func() { cmidHash = old })
	moveMemAtClose = false
	t.Cleanup(func() { moveMemAtClose = true })
	ctx := context.Background()
	for _, how := range []string{"claimed", "read back", "other process"} {
		t.Run(how, func(t *testing.T) {
			// Stamps: "old" at 100, everything after at 5000; retention
			// cuts at 1000.
			var stamp atomic.Int64
			stamp.Store(100)
			opts := Options{Clock: func() int64 { return stamp.Load() }}
			path := filepath.Join(t.TempDir(), "d.db")
			var first, second *DB
			open := func() *DB {
				db, err := Open(ctx, path, opts)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { db.Close() })
				return db
			}
			if how == "other process" {
				rdb := redistest.Client(t)
				opts.Redis, opts.RedisPrefix = rdb, "displaced"
			}
			first = open()
			if err := first.CreateGroup(ctx, "g", "g", "u1", nil); err != nil {
				t.Fatal(err)
			}
			second = first
			if how == "other process" {
				second = open()
			}
			send := func(db *DB, cmid string) (chat.Message, bool) {
				t.Helper()
				m, dup, err := db.Append(ctx, chat.Message{Conv: "g", From: "u1", ClientMsgID: cmid, Kind: chat.KindText, Body: cmid})()
				if err != nil {
					t.Fatal(err)
				}
				return m, dup
			}
			send(first, "old")
			stamp.Store(5000)
			kept, _ := send(first, "kept") // the next slot: the hash is old's
			if how == "read back" {
				first.Close()
				second = open()
			}
			// second's level holds "kept" in its second slot now, from a
			// read back or from the other process's rows (its first use).
			if n, err := second.DeleteBefore(ctx, time.UnixMilli(1000)); err != nil || n != 1 {
				t.Fatalf("retention deleted %d (%v), want old alone", n, err)
			}
			if got, dup := send(second, "kept"); !dup || got.Seq != kept.Seq {
				t.Fatalf("retry of kept: seq %d dup %v, want seq %d as a duplicate", got.Seq, dup, kept.Seq)
			}
		})
	}
}
