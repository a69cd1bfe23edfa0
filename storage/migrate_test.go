package storage

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strconv"
	"testing"
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
	raw, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (9999, '9999_future.sql', 0)`); err != nil {
		t.Fatal(err)
	}
	raw.Close()
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
