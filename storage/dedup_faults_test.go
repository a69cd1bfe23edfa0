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

	"github.com/imserver/imserver/chat"
	"github.com/imserver/imserver/storage"
)

// TestDedupMigrationHelperProcess is the process TestKillDuringDedupMigration
// kills: it opens (and so migrates) the database, logging each batch.
func TestDedupMigrationHelperProcess(t *testing.T) {
	path := os.Getenv("IMSERVER_DEDUP_TEST_DB")
	if path == "" {
		return // only as the helper process of TestKillDuringDedupMigration
	}
	storage.SetDedupBatchForTest(100)
	db, err := storage.Open(context.Background(), path, storage.Options{Logger: slog.New(slog.NewTextHandler(os.Stdout, nil))})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	db.Close()
	fmt.Println("done")
}

// TestKillDuringDedupMigration: a database made by schema 9 (through
// schema 5 and migrations 0006 and 0009, as a real upgrade) is killed
// (SIGKILL) in the middle of migration 0010's copy of the dedup index; it
// stays at schema 9 with the batches it committed, and the next start goes on from
// there (it copies fewer entries than there are) to the end: every message
// has its dedup entry once, the old index is gone, retries of messages
// from before and after the kill get their first seq, integrity_check
// passes.
func TestKillDuringDedupMigration(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v9.db")
	const total = 5000
	want, err := storage.MakeSchema5ForTest(path, 5, 20, total)
	if err != nil {
		t.Fatal(err)
	}
	if err := storage.MigrateToForTest(path, 9); err != nil {
		t.Fatal(err)
	}
	if got := schemaOf(t, path); got != 9 {
		t.Fatalf("made schema %d, want 9", got)
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestDedupMigrationHelperProcess$", "-test.v")
	cmd.Env = append(os.Environ(), "IMSERVER_DEDUP_TEST_DB="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	batches := 0
	for batches < 5 && sc.Scan() {
		if strings.Contains(sc.Text(), "copying the dedup index") {
			batches++
		}
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if batches < 5 {
		t.Fatalf("the migration logged %d batches before it ended", batches)
	}
	if got := schemaOf(t, path); got != 9 {
		t.Fatalf("after the kill the schema is %d, want 9", got)
	}
	var log strings.Builder
	defer storage.SetDedupBatchForTest(500000)
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
		t.Fatalf("the restart copied %d entries, want at most %d (the rest was copied before the kill)", copied, total-5*100)
	}
	if v, err := db.SchemaVersion(context.Background()); err != nil || v != storage.KnownSchema() {
		t.Fatalf("schema after the restart %d (%v)", v, err)
	}
	if s, err := db.IntegrityCheck(); err != nil || s != "ok" {
		t.Fatalf("integrity_check: %q %v", s, err)
	}
	raw, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var entries, distinct, index int
	if err := raw.QueryRow(`SELECT (SELECT COUNT(*) FROM dedup_0) + (SELECT COUNT(*) FROM dedup_1) + (SELECT COUNT(*) FROM dedup_2),
		(SELECT COUNT(*) FROM (SELECT DISTINCT conv, seq FROM dedup_2)),
		(SELECT COUNT(*) FROM sqlite_master WHERE name = 'messages_cmid')`).Scan(&entries, &distinct, &index); err != nil {
		t.Fatal(err)
	}
	if entries != total || distinct != total || index != 0 {
		t.Fatalf("%d dedup entries for %d messages (%d distinct), old index left: %d", entries, total, distinct, index)
	}
	ctx := context.Background()
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
	m, dup, err := db.Append(ctx, chat.Message{Conv: "g0", From: "u0", ClientMsgID: "new", Kind: chat.KindText, Body: "after"})()
	if err != nil || dup || m.Seq != int64(len(want["g0"])+1) {
		t.Fatalf("new message: %+v dup %v %v", m, dup, err)
	}
}
