package storage

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/imserver/imserver/chat"
)

// TestMigrationIndexesOldMessages: a database that only 0001 made, with
// messages in it, is searchable once the new binary opens it and its
// background job has indexed them.
func TestMigrationIndexesOldMessages(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	old, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if err := migrateTo(ctx, old, 1, nil); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO conversations (id, kind, name, members_count, max_seq, version, created_at) VALUES ('g1', 'group', 'g', 1, 3, 1, 0), ('g2', 'group', 'h', 1, 1, 1, 0)`,
		`INSERT INTO members (conv_id, user_id, role, version, joined_at) VALUES ('g1', 'u', 'owner', 1, 0), ('g2', 'u', 'owner', 1, 0)`,
		`INSERT INTO messages (conv_id, seq, sender_id, client_msg_id, kind, body, ts) VALUES
			('g1', 1, 'u', 'a', 'text', 'Déjà vu in the old days', 1), ('g1', 2, 'u', 'b', 'text', 'nothing here', 2),
			('g1', 3, 'u', 'c', 'text', 'old days again', 3), ('g2', 1, 'u', 'd', 'text', 'days of old', 4)`,
	} {
		if _, err := old.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	old.Close()

	db, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// The older messages are indexed in the background.
	waitIndexed(t, db)
	sq, err := chat.ParseSearch("old days")
	if err != nil {
		t.Fatal(err)
	}
	sq.Limit = 10
	res, err := db.Search(ctx, "u", sq)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, h := range res.Results {
		got = append(got, h.Conv+":"+h.Message.ClientMsgID)
	}
	if want := "g2:d g1:c g1:a"; len(got) != 3 || got[0]+" "+got[1]+" "+got[2] != want || !res.Completed {
		t.Fatalf("results %v (completed %v), want %s", got, res.Completed, want)
	}
	sq, _ = chat.ParseSearch("deja")
	sq.Limit = 10
	if res, err = db.Search(ctx, "u", sq); err != nil || len(res.Results) != 1 {
		t.Fatalf("accent-insensitive search: %+v %v", res, err)
	}
	// What is sent after the upgrade comes first.
	if _, _, err := db.Append(ctx, chat.Message{Conv: "g1", From: "u", ClientMsgID: "e", Kind: chat.KindText, Body: "new old days"})(); err != nil {
		t.Fatal(err)
	}
	sq, _ = chat.ParseSearch("old days")
	sq.Limit = 10
	if res, err = db.Search(ctx, "u", sq); err != nil || len(res.Results) != 4 || res.Results[0].Message.ClientMsgID != "e" {
		t.Fatalf("after a new message: %+v %v", res, err)
	}
}
