package backup

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPostgresWithoutClientTools: without pg_dump (or pg_restore) backup
// and restore of a PostgreSQL database refuse before touching anything,
// and the message names the programs and the commands to run by hand.
func TestPostgresWithoutClientTools(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	old := pgToolDirs
	pgToolDirs = func() []string { return []string{t.TempDir()} }
	defer func() { pgToolDirs = old }()
	dir := t.TempDir()
	o := Options{DB: "postgres://u:pw@127.0.0.1:1/db", FilesDir: filepath.Join(dir, "files")}
	archive := filepath.Join(dir, "b.tar")
	_, err := Create(context.Background(), archive, o)
	if err == nil || !strings.Contains(err.Error(), "pg_dump not found") || !strings.Contains(err.Error(), "pg_dump --format=custom") || !strings.Contains(err.Error(), "pg_restore") {
		t.Fatalf("backup without pg_dump: %v", err)
	}
	if _, err := os.Stat(archive); err == nil {
		t.Fatalf("an archive was written")
	}
	if err := os.WriteFile(archive, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Restore(context.Background(), archive, o, false)
	if err == nil || !strings.Contains(err.Error(), "pg_restore not found") {
		t.Fatalf("restore without pg_restore: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("restore left %v", ents)
	}
}

// TestPGMajorOrder: the newest PostgreSQL's programs are tried first.
func TestPGMajorOrder(t *testing.T) {
	if pgMajor("/usr/lib/postgresql/15/bin") != 15 || pgMajor("/usr/lib/postgresql/9.6/bin") != 9.6 {
		t.Fatalf("pgMajor: %v %v", pgMajor("/usr/lib/postgresql/15/bin"), pgMajor("/usr/lib/postgresql/9.6/bin"))
	}
}
