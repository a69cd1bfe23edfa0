package postgres

import (
	"context"
	"slices"
	"strconv"
	"strings"
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

// TestMigrateOwnAndRunsFromV6: a database of schema 6, whose sends moved
// the sender's read marker and whose reactions have no run, keeps its
// counts and its reactions' order through migration 0007, and follows the
// new rules after it (storage's TestOwnAndRunsMigration, on PostgreSQL).
func TestMigrateOwnAndRunsFromV6(t *testing.T) {
	ctx := context.Background()
	url := pg.NewDB(t)
	db := openTest(t, url, Options{})
	if err := db.CreateGroup(ctx, "g", "g", "u", []string{"v", "w"}); err != nil {
		t.Fatal(err)
	}
	send := func(m chat.Message) int64 {
		t.Helper()
		m.Conv = "g"
		got, _, err := db.Append(ctx, m)()
		if err != nil {
			t.Fatalf("%s: %v", m.ClientMsgID, err)
		}
		return got.Seq
	}
	text := func(from, id string) chat.Message {
		return chat.Message{From: from, ClientMsgID: id, Kind: chat.KindText, Body: "text " + id}
	}
	react := func(from, id, emoji string, on bool) chat.Message {
		return chat.Message{From: from, ClientMsgID: id, Kind: chat.KindReaction, Target: 1, Emoji: emoji, On: &on}
	}
	send(text("u", "t1"))
	send(react("v", "r1", "+1", true))
	send(react("w", "r2", "tada", true))
	send(react("w", "r3", "+1", true))
	send(text("v", "t5"))
	for _, q := range []string{
		`ALTER TABLE reactions DROP COLUMN run`,
		`ALTER TABLE members DROP COLUMN own_unread`,
		`UPDATE members SET read_seq = 1, last_ack_seq = 1 WHERE user_id = 'u'`,
		`UPDATE members SET read_seq = 5, last_ack_seq = 5 WHERE user_id = 'v'`,
		`UPDATE members SET read_seq = 4, last_ack_seq = 4 WHERE user_id = 'w'`,
		`DELETE FROM schema_migrations WHERE version = 7`,
	} {
		if _, err := db.pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()
	db = openTest(t, url, Options{})
	order := func(step string, want ...string) {
		t.Helper()
		p, err := db.Messages(ctx, "g", "u", chat.PageQuery{Limit: 1})
		if err != nil || len(p.Messages) != 1 {
			t.Fatalf("%s: %v", step, err)
		}
		var got []string
		for _, r := range p.Messages[0].Reactions {
			got = append(got, r.Emoji+":"+strings.Join(r.Users, ","))
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", step, got, want)
		}
	}
	unread := func(step string, want map[string]int64) {
		t.Helper()
		for user, n := range want {
			c, err := db.Conversation(ctx, "g", user)
			if err != nil || c.Unread != n {
				t.Errorf("%s: %s's unread %d (%v), want %d", step, user, c.Unread, err, n)
			}
		}
	}
	order("migrated", "+1:v,w", "tada:w")
	unread("migrated", map[string]int64{"u": 1, "v": 0, "w": 1})
	send(react("v", "r6", "+1", false))
	order("the first +1 taken back after the migration", "+1:w", "tada:w")
	send(text("u", "t8"))
	send(text("v", "t9"))
	unread("after new sends", map[string]int64{"u": 2, "v": 1, "w": 3})
}
