package postgres

import (
	"context"
	"slices"
	"strconv"
	"testing"

	"github.com/imserver/imserver/chat"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestMigrateTeamworkFromV3: a database made by migrations 0001–0003, with
// messages, is migrated to 0004 by Open; the messages' search vectors are
// written by the backfill, across several of its batches, also when a
// start died after the migration committed and before the backfill ended
// (the settings row is still there: the next start ends it).
func TestMigrateTeamworkFromV3(t *testing.T) {
	ctx := context.Background()
	url := pg.NewDB(t)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ms, err := knownMigrations()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.version <= 3 {
			if err := applyMigration(ctx, conn.Conn(), m); err != nil {
				t.Fatal(err)
			}
		}
	}
	const filler = 2*backfillBatch + 1
	for _, q := range []string{
		`INSERT INTO conversations (id, kind, name, members_count, max_seq, created_at) VALUES ('g', 'group', 'g', 2, 3 + ` + itoa(filler) + `, 0)`,
		`INSERT INTO members (conv_id, user_id, role, version, joined_at) VALUES ('g', 'u', 'owner', 1, 0), ('g', 'v', 'member', 1, 0)`,
		`INSERT INTO messages (conv_id, seq, sender_id, client_msg_id, kind, body, ts) VALUES
			('g', 1, 'u', 'a', 'text', 'Crème brûlée tonight?', 1), ('g', 2, 'v', 'b', 'text', '', 2)`,
		`INSERT INTO messages (conv_id, seq, sender_id, client_msg_id, kind, body, ts)
			SELECT 'g', s + 2, 'v', 'f' || s, 'text', 'filler ' || s, s + 2 FROM generate_series(1, ` + itoa(filler) + `) AS s`,
		`INSERT INTO messages (conv_id, seq, sender_id, client_msg_id, kind, body, ts) VALUES ('g', 3 + ` + itoa(filler) + `, 'u', 'z', 'text', 'last brulee', 9e6)`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// A start that applied 0004 and died before the backfill.
	for _, m := range ms {
		if m.version == 4 {
			if err := applyMigration(ctx, conn.Conn(), m); err != nil {
				t.Fatal(err)
			}
		}
	}
	conn.Release()

	db := openTest(t, url, Options{})
	if v, err := db.SchemaVersion(ctx); err != nil || v != ms[len(ms)-1].version {
		t.Fatalf("schema version %d, %v", v, err)
	}
	find := func(q string) []int64 {
		t.Helper()
		sq, err := chat.ParseSearch(q)
		if err != nil {
			t.Fatal(err)
		}
		sq.Limit = 5
		res, err := db.Search(ctx, "v", sq)
		if err != nil {
			t.Fatal(err)
		}
		var seqs []int64
		for _, h := range res.Results {
			seqs = append(seqs, h.Message.Seq)
		}
		return seqs
	}
	last := int64(3 + filler)
	if got := find("creme brulee"); !slices.Equal(got, []int64{1}) {
		t.Errorf("creme brulee: %v", got)
	}
	if got := find("brulee"); !slices.Equal(got, []int64{last, 1}) {
		t.Errorf("brulee: %v", got)
	}
	if got := find(`"filler ` + itoa(filler) + `"`); !slices.Equal(got, []int64{last - 1}) {
		t.Errorf("the last filler (third batch): %v", got)
	}
	var pending, vectors int
	if err := db.pool.QueryRow(ctx, `SELECT (SELECT COUNT(*) FROM settings WHERE name = 'search_backfill'),
		(SELECT COUNT(*) FROM messages WHERE search IS NOT NULL)`).Scan(&pending, &vectors); err != nil {
		t.Fatal(err)
	}
	if pending != 0 || vectors != filler+2 {
		t.Errorf("after the backfill: marker %d, %d vectors, want 0 and %d", pending, vectors, filler+2)
	}
	// What was stored before edits existed can be edited now.
	if m, _, err := db.Append(ctx, chat.Message{Conv: "g", From: "u", ClientMsgID: "e", Kind: chat.KindEdit, Target: 1, Body: "pie"})(); err != nil || m.Seq != last+1 {
		t.Fatalf("edit: %d, %v", m.Seq, err)
	}
	if got := find("creme"); len(got) != 0 {
		t.Errorf("creme after the edit: %v", got)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
