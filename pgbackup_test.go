package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/imserver/imserver/internal/pgtest"
	"github.com/jackc/pgx/v5"
)

// newPGDatabase creates a database of its own (pg_dump and pg_restore work
// on databases, not on the schemas other tests use) and returns its URL.
func newPGDatabase(t *testing.T, pg *pgtest.Server, name string) string {
	t.Helper()
	ctx := context.Background()
	name = fmt.Sprintf("%s_%d_%d", name, os.Getpid(), time.Now().UnixNano()%1e9)
	conn, err := pgx.Connect(ctx, pg.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE DATABASE `+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if conn, err := pgx.Connect(ctx, pg.URL("postgres")); err == nil {
			conn.Exec(ctx, `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`)
			conn.Close(ctx)
		}
	})
	return pg.URL(name)
}

// TestBackupUnderLoadAndRestorePostgres: `imserver backup` on a PostgreSQL
// database a server is writing to (messages and uploads under way) writes
// one archive: pg_dump's custom format of one snapshot, the files that
// snapshot names, the manifest. A damaged archive restores nothing;
// `restore` loads it into another database (refusing one with data
// unless --force), and a server on it has every message and file of the
// snapshot. `vacuum` then runs VACUUM (ANALYZE) on the tables.
func TestBackupUnderLoadAndRestorePostgres(t *testing.T) {
	pg := testPostgres(t)
	dir := t.TempDir()
	srcURL := newPGDatabase(t, pg, "bsrc")
	cfg := writeConfig(t, dir, fmt.Sprintf("limits:\n  send_rate: 100000\n  send_burst: 100000\nfiles:\n  dir: %s\n", filepath.Join(dir, "orig-files")))
	orig := startServer(t, srcURL, cfg)
	src := newBackupSource(t, orig, 4)
	conv := src.conv
	archive := filepath.Join(dir, "backup.tar.gz")
	out, sent := src.underLoad(t, func() ([]byte, error) {
		return exec.Command(serverBin, "backup", "--config", cfg, "--db", srcURL, archive).CombinedOutput()
	})
	if strings.Contains(string(out), pgtest.Password) {
		t.Errorf("backup printed the password: %s", out)
	}
	m := readManifest(t, archive)
	if m.Store != "postgres" || m.Messages < 4 || m.Users != 2 || m.Conversations != 1 || m.Schema == 0 {
		t.Fatalf("manifest: %+v", m)
	}
	var dumpEntry bool
	blobs := 0
	for _, e := range m.Entries {
		dumpEntry = dumpEntry || e.Name == "imserver.pgdump"
		if strings.HasPrefix(e.Name, "files/") {
			blobs++
		}
	}
	if !dumpEntry || int64(blobs) != m.Files || len(m.Missing) != 0 {
		t.Fatalf("archive entries: dump %v, %d contents (missing %v) for %d files", dumpEntry, blobs, m.Missing, m.Files)
	}
	t.Logf("backed up %d messages and %d files while %d more were sent", m.Messages, m.Files, sent)

	dstURL := newPGDatabase(t, pg, "bdst")
	restoredFiles := filepath.Join(dir, "restored-files")
	restore := func(archive string, args ...string) (string, error) {
		args = append([]string{"restore", "--db", dstURL, "--files-dir", restoredFiles}, append(args, archive)...)
		out, err := exec.Command(serverBin, args...).CombinedOutput()
		return string(out), err
	}
	// A SQLite target for a PostgreSQL archive: said, nothing written.
	sqliteTarget := filepath.Join(dir, "sqlite", "im.db")
	if out, err := exec.Command(serverBin, "restore", "--db", sqliteTarget, archive).CombinedOutput(); err == nil || !strings.Contains(string(out), "PostgreSQL") {
		t.Fatalf("restoring a PostgreSQL archive to a file: %v\n%s", err, out)
	}
	// A damaged archive restores nothing.
	bad := filepath.Join(dir, "bad.tar.gz")
	damage(t, archive, bad)
	if out, err := restore(bad); err == nil || !strings.Contains(out, "damaged") {
		t.Fatalf("restoring a damaged archive: %v\n%s", err, out)
	}
	if _, err := os.Stat(restoredFiles); err == nil {
		t.Fatalf("a failed restore made %s", restoredFiles)
	}
	if out, err := restore(archive); err != nil {
		t.Fatalf("restore: %v\n%s", err, out)
	} else if strings.Contains(out, pgtest.Password) {
		t.Errorf("restore printed the password: %s", out)
	}
	if out, err := restore(archive); err == nil || !strings.Contains(out, "--force") {
		t.Fatalf("restore over data without --force: %v\n%s", err, out)
	}
	if out, err := restore(archive, "--force"); err != nil {
		t.Fatalf("restore --force: %v\n%s", err, out)
	}

	rcfg := writeConfig(t, t.TempDir(), fmt.Sprintf("files:\n  dir: %s\n", restoredFiles))
	restored := startServer(t, dstURL, rcfg)
	got, token, _ := src.checkRestored(t, restored, m)
	// Work goes on in the restored database: the next seq follows.
	var sentAns struct {
		Message struct {
			Seq int64 `json:"seq"`
		} `json:"message"`
	}
	if code := restored.do(t, "POST", "/api/v1/conversations/"+conv+"/messages", token,
		map[string]any{"client_msg_id": "after-restore", "body": "hello again"}, &sentAns); code != http.StatusCreated {
		t.Fatalf("send after restore: %d", code)
	}
	if last := got[len(got)-1].Seq; sentAns.Message.Seq != last+1 {
		t.Errorf("send after restore got seq %d, want %d", sentAns.Message.Seq, last+1)
	}

	out, err := exec.Command(serverBin, "vacuum", "--db", dstURL).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "VACUUM (ANALYZE)") || !strings.Contains(string(out), "messages") || strings.Contains(string(out), pgtest.Password) {
		t.Fatalf("vacuum: %v\n%s", err, out)
	}
	out, err = exec.Command(serverBin, "vacuum", "--full", "--db", dstURL).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "VACUUM (FULL, ANALYZE)") {
		t.Fatalf("vacuum --full: %v\n%s", err, out)
	}
}
