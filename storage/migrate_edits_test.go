package storage

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/imserver/imserver/chat"
)

// TestMigrateEditsIndex: a database as schema 12 left it (every mutation
// in messages_targets) holding a message edited twice is brought to 13,
// which indexes edits alone, and a delete afterwards still finds both
// edits and erases their bodies from the file.
func TestMigrateEditsIndex(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "edits.db")
	db, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.CreateGroup(ctx, "g1", "g", "u", nil); err != nil {
		t.Fatal(err)
	}
	n := 0
	send := func(db *DB, m chat.Message) chat.Message {
		t.Helper()
		n++
		m.Conv, m.From, m.ClientMsgID = "g1", "u", fmt.Sprint("c", n)
		if m.Kind == "" {
			m.Kind = chat.KindText
		}
		got, _, err := db.Append(ctx, m)()
		if err != nil {
			t.Fatalf("%+v: %v", m, err)
		}
		return got
	}
	on := true
	x := send(db, chat.Message{Body: "original words"})
	send(db, chat.Message{Kind: chat.KindEdit, Target: x.Seq, Body: "firstedit words"})
	send(db, chat.Message{Kind: chat.KindReaction, Target: x.Seq, Emoji: "+1", On: &on})
	send(db, chat.Message{Kind: chat.KindEdit, Target: x.Seq, Body: "secondedit words"})
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// Back to schema 12's index, as that release left this file.
	raw, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`DROP INDEX messages_edits`,
		`CREATE INDEX messages_targets ON messages (conv, target) WHERE target IS NOT NULL`,
		`DELETE FROM schema_migrations WHERE version = 13`,
	} {
		if _, err := raw.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	raw.Close()

	db, err = Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	send(db, chat.Message{Kind: chat.KindDelete, Target: x.Seq})
	var indexes []string
	rows, err := db.readers.Query(`SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'messages' ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		indexes = append(indexes, s)
	}
	rows.Close()
	if fmt.Sprint(indexes) != "[messages_edits messages_seq]" {
		t.Errorf("indexes of messages: %v, want messages_edits and messages_seq", indexes)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{path, path + "-wal"} {
		data, err := os.ReadFile(f)
		if os.IsNotExist(err) {
			continue
		} else if err != nil {
			t.Fatal(err)
		}
		for _, w := range []string{"original", "firstedit", "secondedit"} {
			if bytes.Contains(data, []byte(w)) {
				t.Errorf("%s still holds %q", filepath.Base(f), w)
			}
		}
	}
}
