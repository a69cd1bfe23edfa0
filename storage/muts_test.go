package storage

import (
	"context"
	"testing"
	"time"

	"github.com/imserver/imserver/chat"
)

// unread returns user's unread count in g.
func unread(t *testing.T, db *DB, user string) int64 {
	t.Helper()
	c, err := db.Conversation(context.Background(), "g", user)
	if err != nil {
		t.Fatal(err)
	}
	return c.Unread
}

// TestMutationCountsAcrossTheMigration: a database of schema 13 keeps its
// mutations in uncounted; after migration 0014 the new ones are counted
// on their rows, and unread leaves out both, for members whose read
// markers fall before, among and after the old ones, and for a member who
// left.
func TestMutationCountsAcrossTheMigration(t *testing.T) {
	ctx := context.Background()
	db, path := openTest(t, Options{})
	if err := db.CreateGroup(ctx, "g", "g", "u", []string{"v", "w", "x"}); err != nil {
		t.Fatal(err)
	}
	t1 := send(t, db, textMsg("u", "t1"))
	send(t, db, reactMsg("v", "r1", t1))
	t2 := send(t, db, textMsg("u", "t2"))
	send(t, db, chat.Message{Conv: "g", From: "u", ClientMsgID: "e1", Kind: chat.KindEdit, Target: t1, Body: "edited"})
	db.Close()

	// Back to schema 13: the mutations are rows of uncounted, and no row
	// has a count.
	execRaw(t, path,
		`INSERT INTO uncounted (conv_id, seq) SELECT 'g', seq FROM messages WHERE target IS NOT NULL`,
		`ALTER TABLE messages DROP COLUMN muts`,
		`ALTER TABLE conversations DROP COLUMN muts`,
		`ALTER TABLE conversations DROP COLUMN muts_cut`,
		`DELETE FROM schema_migrations WHERE version = 14`)
	db = reopenAt(t, path, 14)
	t3 := send(t, db, textMsg("u", "t3"))
	send(t, db, reactMsg("v", "r2", t3))
	send(t, db, textMsg("u", "t4"))
	// 1 t1, 2 r1, 3 t2, 4 e1 (before the migration), 5 t3, 6 r2, 7 t4.
	if _, _, err := db.SetRead(ctx, "g", "x", t2); err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.SetRead(ctx, "g", "v", t1); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.readers.QueryRow(`SELECT COUNT(*) FROM uncounted`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d rows in uncounted (%v), want the 2 mutations stored before the migration", n, err)
	}
	for user, want := range map[string]int64{"w": 4, "x": 2, "u": 0} {
		if got := unread(t, db, user); got != want {
			t.Errorf("%s's unread: %d, want %d", user, got, want)
		}
	}
	// v read up to 1 and then reacted (6): a send moves no marker.
	if got := unread(t, db, "v"); got != 3 {
		t.Errorf("v's unread: %d, want 3 (t2, t3, t4)", got)
	}
	// w leaves at 7; what comes after is not its.
	if err := db.RemoveMember(ctx, "g", "w"); err != nil {
		t.Fatal(err)
	}
	send(t, db, reactMsg("u", "r3", t3))
	send(t, db, textMsg("u", "t5"))
	if got := unread(t, db, "w"); got != 4 {
		t.Errorf("w's unread after leaving: %d, want 4", got)
	}
	if got := unread(t, db, "x"); got != 3 {
		t.Errorf("x's unread: %d, want 3 (t3, t4, t5)", got)
	}
}

// TestMutationCountsOfTwoProcesses: two processes on one file (seqs from
// Redis) count the mutations of one conversation in turn; each takes the
// other's count before counting its own.
func TestMutationCountsOfTwoProcesses(t *testing.T) {
	ctx := context.Background()
	a, b := openShared(t)
	if err := a.CreateGroup(ctx, "g", "g", "u", []string{"v", "w"}); err != nil {
		t.Fatal(err)
	}
	t1 := send(t, a, textMsg("u", "t1"))
	send(t, b, reactMsg("v", "r1", t1))
	send(t, a, reactMsg("u", "r2", t1))
	send(t, b, textMsg("v", "t2"))
	send(t, a, chat.Message{Conv: "g", From: "u", ClientMsgID: "e1", Kind: chat.KindEdit, Target: t1, Body: "edited"})
	for _, db := range []*DB{a, b} {
		if got := unread(t, db, "w"); got != 2 {
			t.Errorf("w's unread: %d, want 2 (t1, t2)", got)
		}
	}
	var muts int64
	if err := a.readers.QueryRow(`SELECT muts FROM conversations WHERE id = 'g'`).Scan(&muts); err != nil || muts != 3 {
		t.Fatalf("the conversation's count: %d (%v), want 3", muts, err)
	}
}

// TestMutationCountsAfterRetention: retention deletes the rows at and
// below a read marker, and the whole history of a quiet group; the
// mutations it deleted are not subtracted from what comes after.
func TestMutationCountsAfterRetention(t *testing.T) {
	ctx := context.Background()
	db, now := openGroup(t)
	t1 := send(t, db, textMsg("u", "t1"))
	send(t, db, reactMsg("u", "r1", t1))
	send(t, db, reactMsg("v", "r2", t1))
	t2 := send(t, db, textMsg("u", "t2"))
	if _, _, err := db.SetRead(ctx, "g", "v", t2); err != nil {
		t.Fatal(err)
	}
	cut := now.Load() + 1
	send(t, db, textMsg("u", "t3"))
	t4 := send(t, db, textMsg("u", "t4"))
	if got := unread(t, db, "v"); got != 2 {
		t.Fatalf("v's unread before retention: %d, want 2", got)
	}
	if n, err := db.DeleteBefore(ctx, time.UnixMilli(cut)); err != nil || n != 4 {
		t.Fatalf("retention deleted %d (%v), want 4", n, err)
	}
	if got := unread(t, db, "v"); got != 2 {
		t.Errorf("v's unread after retention deleted its read marker's row: %d, want 2", got)
	}
	// v reads all; the whole history goes; v, and a member who joins
	// then, count only what comes after.
	if _, _, err := db.SetRead(ctx, "g", "v", t4); err != nil {
		t.Fatal(err)
	}
	if n, err := db.DeleteBefore(ctx, time.UnixMilli(now.Load()+1)); err != nil || n != 2 {
		t.Fatalf("retention deleted %d (%v), want 2", n, err)
	}
	if _, err := db.AddMembers(ctx, "g", []string{"w"}); err != nil {
		t.Fatal(err)
	}
	t5 := send(t, db, textMsg("u", "t5"))
	send(t, db, reactMsg("u", "r3", t5))
	send(t, db, textMsg("u", "t6"))
	for user, want := range map[string]int64{"w": 2, "v": 2} {
		if got := unread(t, db, user); got != want {
			t.Errorf("%s's unread after the history went: %d, want %d", user, got, want)
		}
	}
}
