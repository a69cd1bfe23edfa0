package storage

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/imserver/imserver/chat"
)

// TestSchemaVersion: a fresh database is at the newest embedded migration.
func TestSchemaVersion(t *testing.T) {
	db, _ := openTest(t, Options{})
	v, err := db.SchemaVersion(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if v < 1 || v != KnownSchema() {
		t.Fatalf("schema %d, want the newest embedded migration %d", v, KnownSchema())
	}
}

// TestOpenRefusesNewerSchema: a database a newer imserver migrated is not
// opened, with an error the caller can recognise and print.
func TestOpenRefusesNewerSchema(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "new.db")
	db, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	execRaw(t, path, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (9999, '9999_future.sql', 0)`)
	db, err = Open(ctx, path, Options{})
	if err == nil {
		db.Close()
		t.Fatal("opened a database with a newer schema")
	}
	var tooNew *SchemaTooNewError
	if !errors.As(err, &tooNew) || tooNew.Schema != 9999 || tooNew.Known != KnownSchema() {
		t.Fatalf("err %v (%T), want *SchemaTooNewError{9999, %d}", err, err, KnownSchema())
	}
	want := "database schema 9999 is newer than this imserver (knows up to " + strconv.Itoa(KnownSchema()) + "); upgrade imserver"
	if err.Error() != want {
		t.Fatalf("message %q, want %q", err, want)
	}
}

// TestMigrateFormerMembers: a database as schema 12 left it, with a
// kicked member, gets the index of former members (0013), and an edit of
// a message the kicked member saw then moves that member's entry.
func TestMigrateFormerMembers(t *testing.T) {
	ctx := context.Background()
	db, path := openTest(t, Options{})
	if err := db.CreateGroup(ctx, "g", "g", "alice", []string{"carol"}); err != nil {
		t.Fatal(err)
	}
	m, _, err := db.Append(ctx, chat.Message{Conv: "g", From: "alice", ClientMsgID: "1", Kind: chat.KindText, Body: "seen by carol"})()
	if err != nil {
		t.Fatal(err)
	}
	if err := db.RemoveMember(ctx, "g", "carol"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	execRaw(t, path, `DROP INDEX members_former`, `DELETE FROM schema_migrations WHERE version = 13`)
	db = reopenAt(t, path, 13)
	before, err := db.Conversation(ctx, "g", "carol")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.Append(ctx, chat.Message{Conv: "g", From: "alice", ClientMsgID: "2", Kind: chat.KindEdit, Target: m.Seq, Body: "edited"})(); err != nil {
		t.Fatal(err)
	}
	after, err := db.Conversation(ctx, "g", "carol")
	if err != nil {
		t.Fatal(err)
	}
	if after.Version <= before.Version || after.LastMessage == nil || after.LastMessage.Body != "edited" {
		t.Fatalf("the kicked member's entry after an edit it sees: version %d → %d, %+v", before.Version, after.Version, after.LastMessage)
	}
}

// execRaw runs stmts on the closed database at path, outside the store:
// how a test takes a database back to an older schema.
func execRaw(t *testing.T, path string, stmts ...string) {
	t.Helper()
	raw, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	for _, q := range stmts {
		if _, err := raw.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// reopenAt opens the database at path, migrating it, and checks that it
// reached schema.
func reopenAt(t *testing.T, path string, schema int) *DB {
	t.Helper()
	db, err := Open(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if v, _ := db.SchemaVersion(context.Background()); v < schema {
		t.Fatalf("schema %d after the upgrade, want %d", v, schema)
	}
	return db
}
