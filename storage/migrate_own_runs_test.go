package storage

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/imserver/imserver/chat"
)

// TestOwnAndRunsMigration: a database of schema 16, whose sends moved the
// sender's read marker and whose reactions have no run, keeps its counts
// and its reactions' order through migration 0017, and follows the new
// rules after it: an emoji keeps its place while anyone reacts with it,
// and a send moves no marker.
func TestOwnAndRunsMigration(t *testing.T) {
	ctx := context.Background()
	db, path := openTest(t, Options{})
	if err := db.CreateGroup(ctx, "g", "g", "u", []string{"v", "w"}); err != nil {
		t.Fatal(err)
	}
	t1 := send(t, db, textMsg("u", "t1"))
	on := true
	react := func(from, id, emoji string, on bool) chat.Message {
		return chat.Message{Conv: "g", From: from, ClientMsgID: id, Kind: chat.KindReaction, Target: t1, Emoji: emoji, On: &on}
	}
	send(t, db, react("v", "r1", "+1", on))
	send(t, db, react("w", "r2", "tada", on))
	send(t, db, react("w", "r3", "+1", on))
	t5 := send(t, db, textMsg("v", "t5"))
	db.Close()

	// Back to schema 16: no run, no own count, and the markers where each
	// one's last send put them then (1, 5, 4).
	execRaw(t, path,
		`ALTER TABLE reactions DROP COLUMN run`,
		`ALTER TABLE members DROP COLUMN own_unread`,
		`UPDATE members SET read_seq = 1, last_ack_seq = 1 WHERE user_id = 'u'`,
		`UPDATE members SET read_seq = 5, last_ack_seq = 5 WHERE user_id = 'v'`,
		`UPDATE members SET read_seq = 4, last_ack_seq = 4 WHERE user_id = 'w'`,
		`DELETE FROM schema_migrations WHERE version = 17`)
	db = reopenAt(t, path, 17)
	order := func(step string, want ...string) {
		t.Helper()
		p, err := db.Messages(ctx, "g", "u", chat.PageQuery{After: t1 - 1, Limit: 1})
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
	order("migrated", "+1:v,w", "tada:w")
	send(t, db, react("v", "r6", "+1", false))
	order("the first +1 taken back after the migration", "+1:w", "tada:w")
	for user, want := range map[string]int64{"u": 1, "v": 0, "w": 1} {
		if got := unread(t, db, user); got != want {
			t.Errorf("%s's unread after the migration: %d, want %d", user, got, want)
		}
	}
	// v sends again: its marker stays at 5, and its text is not unread.
	send(t, db, textMsg("u", "t8"))
	send(t, db, textMsg("v", "t9"))
	for user, want := range map[string]int64{"u": 2, "v": 1, "w": 3} {
		if got := unread(t, db, user); got != want {
			t.Errorf("%s's unread after new sends: %d, want %d", user, got, want)
		}
	}
	if c, err := db.Conversation(ctx, "g", "v"); err != nil || c.ReadSeq != t5 {
		t.Errorf("v's read_seq %d (%v), want %d", c.ReadSeq, err, t5)
	}
}
