package storage_test

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/imserver/imserver/bench/populate"
	"github.com/imserver/imserver/chat"
	"github.com/imserver/imserver/storage"
)

// heavyMigration stands for a long migration of a big database (an index
// over millions of rows): long enough to be killed in its middle.
const heavyMigration = `CREATE TABLE fault_test_rows (n INTEGER PRIMARY KEY, pad TEXT NOT NULL);
WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 20000)
INSERT INTO fault_test_rows SELECT n, printf('%0120d', n * 7919 % 1000003) FROM c;
CREATE INDEX fault_test_rows_pad ON fault_test_rows (pad);`

const heavyName = "9999_fault_test.sql"

// generated makes a small generated history (through the store's write path).
func generated(t *testing.T, messages int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "history.db")
	_, err := populate.Run(context.Background(), populate.Options{DB: path, Users: 30, Directs: 40, Groups: 10, Messages: messages, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// TestMigrateHelperProcess is the process the kill test kills: it opens
// (and so migrates, with the heavy migration) the database it is given.
func TestMigrateHelperProcess(t *testing.T) {
	path := os.Getenv("IMSERVER_FAULT_TEST_DB")
	if path == "" {
		return // only as the helper process of TestKillDuringMigration
	}
	storage.AddTestMigration(heavyName, heavyMigration)
	fmt.Println("migrating")
	// A small page cache spills the migration's pages to the WAL early,
	// so the test sees it under way.
	db, err := storage.Open(context.Background(), path, storage.Options{CacheKiB: 256})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	db.Close()
	fmt.Println("done")
}

func schemaOf(t *testing.T, path string) int {
	t.Helper()
	raw, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var v int
	if err := raw.QueryRow(`SELECT MAX(version) FROM schema_migrations`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestKillDuringMigration: a process killed (SIGKILL) in the middle of a
// migration of a generated database leaves it at the schema before that
// migration, intact; the next start applies the migration to the end.
func TestKillDuringMigration(t *testing.T) {
	path := generated(t, 2000)
	before := schemaOf(t, path)
	cmd := exec.Command(os.Args[0], "-test.run", "^TestMigrateHelperProcess$", "-test.v")
	cmd.Env = append(os.Environ(), "IMSERVER_FAULT_TEST_DB="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "migrating" {
	}
	// Kill once the migration has written to the WAL (the heavy insert
	// spills pages before its commit), so the kill lands inside it.
	deadline := time.Now().Add(5 * time.Minute)
	for {
		fi, err := os.Stat(path + "-wal")
		if err == nil && fi.Size() > 1<<20 {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("the migration never wrote 1 MiB to the WAL")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if got := schemaOf(t, path); got != before {
		t.Fatalf("after the kill the schema is %d, want %d (the killed migration must leave nothing)", got, before)
	}
	storage.AddTestMigration(heavyName, heavyMigration)
	defer storage.AddTestMigration("9998_noop.sql", "SELECT 1;")
	db, err := storage.Open(context.Background(), path, storage.Options{})
	if err != nil {
		t.Fatalf("start after the kill: %v", err)
	}
	defer db.Close()
	if v, err := db.SchemaVersion(context.Background()); err != nil || v != 9999 {
		t.Fatalf("schema after the restart %d (%v), want 9999", v, err)
	}
	if s, err := db.IntegrityCheck(); err != nil || s != "ok" {
		t.Fatalf("integrity_check: %q %v", s, err)
	}
}

// TestDiskFullDuringPopulation: the generator on a disk that fills up
// (max_page_count) stops with a disk-full error (the store's unavailable), and the
// database stays intact: every message answered as stored is there, and
// the store opens again.
func TestDiskFullDuringPopulation(t *testing.T) {
	defer storage.SetTestPragmas()
	storage.SetTestPragmas("max_page_count(700)") // 2.8 MiB with 4 KiB pages
	path := filepath.Join(t.TempDir(), "full.db")
	_, err := populate.Run(context.Background(), populate.Options{DB: path, Users: 20, Directs: 20, Groups: 5, Messages: 200000, Seed: 3})
	// The store reports it as unavailable (disk full), SQLite's own words
	// where it is not wrapped.
	if err == nil || !(strings.Contains(err.Error(), "disk full") || strings.Contains(err.Error(), "database or disk is full")) {
		t.Fatalf("populate on a full disk: %v, want a disk full error", err)
	}
	storage.SetTestPragmas()
	db, err := storage.Open(context.Background(), path, storage.Options{})
	if err != nil {
		t.Fatalf("open after the full disk: %v", err)
	}
	defer db.Close()
	if s, err := db.IntegrityCheck(); err != nil || s != "ok" {
		t.Fatalf("integrity_check: %q %v", s, err)
	}
}

// TestDiskFullDuringMigration: a migration that runs out of space fails
// with a clear error and leaves the schema where it was; with space, the
// next start completes it.
func TestDiskFullDuringMigration(t *testing.T) {
	path := generated(t, 2000)
	before := schemaOf(t, path)
	storage.AddTestMigration(heavyName, heavyMigration)
	defer storage.AddTestMigration("9998_noop.sql", "SELECT 1;")
	defer storage.SetTestPragmas()
	// Room for a third of what the migration writes.
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	storage.SetTestPragmas(fmt.Sprintf("max_page_count(%d)", fi.Size()/4096+600))
	_, err = storage.Open(context.Background(), path, storage.Options{})
	if err == nil || !strings.Contains(err.Error(), "database or disk is full") || !strings.Contains(err.Error(), heavyName) {
		t.Fatalf("migration on a full disk: %v", err)
	}
	if got := schemaOf(t, path); got != before {
		t.Fatalf("schema %d after the failed migration, want %d", got, before)
	}
	storage.SetTestPragmas()
	db, err := storage.Open(context.Background(), path, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if v, _ := db.SchemaVersion(context.Background()); v != 9999 {
		t.Fatalf("schema %d, want 9999", v)
	}
	if s, err := db.IntegrityCheck(); err != nil || s != "ok" {
		t.Fatalf("integrity_check: %q %v", s, err)
	}
	// The history is all there.
	u, _, err := db.UserByName(context.Background(), populate.Username(0))
	if err != nil {
		t.Fatal(err)
	}
	ch, err := db.ConversationsSince(context.Background(), u.ID, 0, chat.MaxPageLimit)
	if err != nil || len(ch.Conversations) == 0 {
		t.Fatalf("conversations of pop0: %d, %v", len(ch.Conversations), err)
	}
}

// TestCopyMigrationHelperProcess is the process TestKillDuringCopyMigration
// kills: it opens (and so migrates) the database it is given, copying in
// small batches (migration 0006's, 0009's or 0010's), logging each to
// stdout.
func TestCopyMigrationHelperProcess(t *testing.T) {
	path := os.Getenv("IMSERVER_COPY_TEST_DB")
	if path == "" {
		return // only as the helper process of TestKillDuringCopyMigration
	}
	storage.SetKeysBatchForTest(100)
	storage.SetLayoutBatchForTest(100)
	storage.SetDedupBatchForTest(100)
	db, err := storage.Open(context.Background(), path, storage.Options{Logger: slog.New(slog.NewTextHandler(os.Stdout, nil))})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	db.Close()
	fmt.Println("done")
}

// TestKillDuringCopyMigration: a process killed (SIGKILL) in the middle of
// the copy of migration 0006 (integer keys, from schema 5), 0009 (arrival
// order, from schema 8) or 0010 (dedup levels, from schema 9) leaves the
// database at its schema with the batches it committed; the next start
// goes on from there (it copies fewer rows than there are) to the end,
// with every message there once, the dedup intact (retries of messages
// from before and after the kill get their first seq) and
// integrity_check passing.
func TestKillDuringCopyMigration(t *testing.T) {
	for _, c := range []struct {
		name   string
		schema int
		marker string // the copy's progress lines say this
		check  func(t *testing.T, path string, total int)
	}{
		{"0006", 5, "copying messages", nil},
		{"0009", 8, "copying messages", nil},
		{"0010", 9, "copying the dedup index", checkDedupCopied},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "old.db")
			const total = 5000
			want, err := storage.MakeSchemaForTest(path, c.schema, 5, 20, total)
			if err != nil {
				t.Fatal(err)
			}
			killDuringCopy(t, path, c.schema, c.marker, want, total)
			if c.check != nil {
				c.check(t, path, total)
			}
		})
	}
}

func killDuringCopy(t *testing.T, path string, schema int, marker string, want map[string][]string, total int) {
	cmd := exec.Command(os.Args[0], "-test.run", "^TestCopyMigrationHelperProcess$", "-test.v")
	cmd.Env = append(os.Environ(), "IMSERVER_COPY_TEST_DB="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Killed after its fifth batch committed, while it copies the next.
	sc := bufio.NewScanner(out)
	batches := 0
	for batches < 5 && sc.Scan() {
		if strings.Contains(sc.Text(), marker) {
			batches++
		}
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if batches < 5 {
		t.Fatalf("the migration logged %d batches before it ended", batches)
	}
	if got := schemaOf(t, path); got != schema {
		t.Fatalf("after the kill the schema is %d, want %d", got, schema)
	}
	var log strings.Builder
	defer storage.SetKeysBatchForTest(100000)
	defer storage.SetLayoutBatchForTest(100000)
	defer storage.SetDedupBatchForTest(500000)
	storage.SetKeysBatchForTest(100)
	storage.SetLayoutBatchForTest(100)
	storage.SetDedupBatchForTest(100)
	db, err := storage.Open(context.Background(), path, storage.Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatalf("start after the kill: %v", err)
	}
	defer db.Close()
	var copied int
	if i := strings.Index(log.String(), `done" copied=`); i < 0 {
		t.Fatalf("no end of the migration in the log:\n%s", log.String())
	} else {
		fmt.Sscanf(log.String()[i:], `done" copied=%d`, &copied)
	}
	if copied < 1 || copied > total-5*100 {
		t.Fatalf("the restart copied %d messages, want at most %d (the rest was copied before the kill)", copied, total-5*100)
	}
	if v, err := db.SchemaVersion(context.Background()); err != nil || v != storage.KnownSchema() {
		t.Fatalf("schema after the restart %d (%v)", v, err)
	}
	if s, err := db.IntegrityCheck(); err != nil || s != "ok" {
		t.Fatalf("integrity_check: %q %v", s, err)
	}
	ctx := context.Background()
	n := 0
	for conv, cmids := range want {
		p, err := db.Messages(ctx, conv, "u0", chat.PageQuery{Limit: 5000})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Messages) != len(cmids) {
			t.Fatalf("%s: %d messages, want %d", conv, len(p.Messages), len(cmids))
		}
		for i, m := range p.Messages {
			if m.Seq != int64(i+1) || m.ClientMsgID != cmids[i] {
				t.Fatalf("%s: message %d is %+v, want %s", conv, i, m, cmids[i])
			}
		}
		n += len(p.Messages)
	}
	if n != total {
		t.Fatalf("%d messages after the migration, want %d", n, total)
	}
	// A retry of a message copied before the kill and of one after.
	for _, cmid := range []string{want["g0"][20], want["g19"][len(want["g19"])-1]} {
		var n int
		fmt.Sscanf(cmid, "c%d", &n)
		from := []string{"gone", "u0", "u1", "u2", "u3", "u4"}[(n/20)%6]
		if from == "gone" {
			continue
		}
		m, dup, err := db.Append(ctx, chat.Message{Conv: fmt.Sprint("g", n%20), From: from, ClientMsgID: cmid, Kind: chat.KindText, Body: "again"})()
		if err != nil || !dup || m.ClientMsgID != cmid || m.Body == "again" {
			t.Fatalf("retry of %s: %+v dup %v %v", cmid, m, dup, err)
		}
	}
}

// checkDedupCopied: after migrations 0010 and 0011 every message has its
// dedup entry once, in one level on file (the level in memory starts
// empty), and the old index is gone.
func checkDedupCopied(t *testing.T, path string, total int) {
	raw, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var entries, distinct, index int
	if err := raw.QueryRow(`SELECT (SELECT COUNT(*) FROM dedup_1) + (SELECT COUNT(*) FROM dedup_2),
		(SELECT COUNT(*) FROM (SELECT conv, seq FROM dedup_1 UNION SELECT conv, seq FROM dedup_2)),
		(SELECT COUNT(*) FROM sqlite_master WHERE name = 'messages_cmid')`).Scan(&entries, &distinct, &index); err != nil {
		t.Fatal(err)
	}
	if entries != total || distinct != total || index != 0 {
		t.Fatalf("%d dedup entries for %d messages (%d distinct), old index left: %d", entries, total, distinct, index)
	}
}
