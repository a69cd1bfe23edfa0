package backup

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/imserver/imserver/internal/pgtest"
	"github.com/imserver/imserver/postgres"
	"github.com/jackc/pgx/v5"
)

// TestPostgresRestoreOtherSchema: a backup of the database a URL's
// search_path names (pg_dump --schema) holds that schema by name, and
// pg_restore would load it there whatever the target's search_path. A
// restore to a URL with another search_path is refused, even with force,
// and neither schema changes: with --clean the source schema was dropped
// and loaded again from the archive (everything written to it since the
// backup lost) while the target stayed empty.
func TestPostgresRestoreOtherSchema(t *testing.T) {
	ctx := context.Background()
	pg, err := pgtest.Start("")
	if err != nil {
		t.Fatalf("starting PostgreSQL: %v", err)
	}
	defer pg.Stop()
	src, dst := pg.NewDB(t), pg.NewDB(t)
	db, err := postgres.Open(ctx, src, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	archive := filepath.Join(t.TempDir(), "b.tar")
	if _, err := Create(ctx, archive, Options{DB: src}); err != nil {
		t.Fatal(err)
	}
	// Written to the source after the backup.
	conn, err := pgx.Connect(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (9999, 'after the backup', 0)`); err != nil {
		t.Fatal(err)
	}
	for _, force := range []bool{false, true} {
		_, err := Restore(ctx, archive, Options{DB: dst}, force)
		if err == nil || !strings.Contains(err.Error(), "search_path") {
			t.Errorf("restore (force %v) of a backup of another schema: %v, want a refusal", force, err)
		}
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT COUNT(*) FROM schema_migrations WHERE version = 9999`).Scan(&n); err != nil || n != 1 {
		t.Errorf("the source schema lost what was written after the backup: %d rows, %v", n, err)
	}
	if has, err := pgHasData(ctx, dst); err != nil || has {
		t.Errorf("the target has data: %v %v", has, err)
	}
}
