package storage

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/imserver/imserver/chat"
)

// writeCalls is the process's count of write system calls so far
// (/proc/self/io syscw).
func writeCalls(t *testing.T) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/io")
	if err != nil {
		t.Fatalf("this test counts write calls in /proc/self/io: %v", err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "syscw: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no syscw in /proc/self/io")
	return 0
}

// appendMany appends n messages of body spread over convs, all in flight
// at once (so that they share batches), and waits for every answer.
func appendMany(t *testing.T, db *DB, convs []string, prefix string, n int, body string) {
	t.Helper()
	ctx := context.Background()
	pend := make([]chat.Pending, 0, n)
	for i := range n {
		pend = append(pend, db.Append(ctx, chat.Message{Conv: convs[i%len(convs)], From: "u", ClientMsgID: fmt.Sprint(prefix, i), Kind: "text", Body: body}))
	}
	for _, p := range pend {
		if _, _, err := p(); err != nil {
			t.Fatal(err)
		}
	}
}

func makeGroups(t *testing.T, db *DB, n int) []string {
	t.Helper()
	convs := make([]string, n)
	for i := range convs {
		convs[i] = fmt.Sprintf("g%03d", i)
		if err := db.CreateGroup(context.Background(), convs[i], convs[i], "u", nil); err != nil {
			t.Fatal(err)
		}
	}
	return convs
}

// TestWALBufGathersFrames: with synchronous FULL, the frames of a commit
// reach the WAL in a few large writes, not two per page; with NORMAL
// (where a commit is visible before any sync) they are written one by one
// as SQLite writes them.
func TestWALBufGathersFrames(t *testing.T) {
	for _, c := range []struct {
		sync     string
		gathered bool
	}{{"FULL", true}, {"NORMAL", false}} {
		t.Run(c.sync, func(t *testing.T) {
			db, _ := openTest(t, Options{Synchronous: c.sync})
			convs := makeGroups(t, db, 100)
			appendMany(t, db, convs, "warm", 100, "hello")
			pages0, calls0 := db.w.walPages.Load(), writeCalls(t)
			appendMany(t, db, convs, "m", 2000, "hello, world")
			pages, calls := db.w.walPages.Load()-pages0, writeCalls(t)-calls0
			t.Logf("%s: %d WAL pages in %d write calls", c.sync, pages, calls)
			if pages < 50 {
				t.Fatalf("only %d WAL pages written: the test measures nothing", pages)
			}
			if c.gathered && calls > pages/4 {
				t.Fatalf("%d write calls for %d WAL pages: frames are not gathered", calls, pages)
			}
			if !c.gathered && calls < 2*pages {
				t.Fatalf("%d write calls for %d WAL pages with NORMAL: want two per frame", calls, pages)
			}
		})
	}
}

// TestWALBufSpills runs transactions far larger than the writer's page
// cache (which then writes frames to the WAL before COMMIT and reads some
// of them back) and than the buffer itself, a rollback of such a
// transaction, and a crash-free reopen: every message stays intact.
func TestWALBufSpills(t *testing.T) {
	ctx := context.Background()
	var now atomic.Int64
	now.Store(time.Now().UnixMilli())
	clock := func() int64 { return now.Add(1) }
	db, path := openTest(t, Options{Synchronous: "FULL", CacheKiB: 256, Clock: clock})
	convs := makeGroups(t, db, 20)
	old := strings.Repeat("o", 3000)
	appendMany(t, db, convs, "old", 3000, old) // about 9 MiB of bodies
	cutoff := now.Load()
	appendMany(t, db, convs, "new", 600, pageBody)
	// One transaction over thousands of pages: secure_delete rewrites
	// each one the old messages lay on.
	if n, err := db.DeleteBefore(ctx, time.UnixMilli(cutoff+1)); err != nil || n != 3000 {
		t.Fatalf("DeleteBefore: %d, %v", n, err)
	}
	// A transaction that spills and then fails is rolled back whole.
	err := db.w.exec(ctx, func(tx *wtx) error {
		for i := range 2000 {
			if _, err := tx.ExecContext(ctx, `INSERT INTO settings (name, value) VALUES (?, ?)`, fmt.Sprint("spill", i), pageBody); err != nil {
				return err
			}
		}
		return fmt.Errorf("taken back")
	})
	if err == nil || !strings.Contains(err.Error(), "taken back") {
		t.Fatalf("the failing transaction: %v", err)
	}
	check := func(db *DB, want int) {
		t.Helper()
		if s, err := db.IntegrityCheck(); err != nil || s != "ok" {
			t.Fatalf("integrity_check: %q %v", s, err)
		}
		var spilled int
		if err := db.readers.QueryRowContext(ctx, `SELECT COUNT(*) FROM settings WHERE name LIKE 'spill%'`).Scan(&spilled); err != nil || spilled != 0 {
			t.Fatalf("rows of the rolled back transaction: %d, %v", spilled, err)
		}
		for _, conv := range convs {
			page, err := db.Messages(ctx, conv, "u", chat.PageQuery{Limit: chat.MaxPageLimit})
			if err != nil {
				t.Fatal(err)
			}
			if len(page.Messages) != want {
				t.Fatalf("%s: %d messages, want the %d new ones", conv, len(page.Messages), want)
			}
			for _, m := range page.Messages {
				if m.Body != pageBody && m.ClientMsgID[:5] != "again" {
					t.Fatalf("%s seq %d: body of %d bytes, want the page body", conv, m.Seq, len(m.Body))
				}
			}
		}
	}
	check(db, 30)
	// Written since, after the rollback: nothing of it came back.
	appendMany(t, db, convs, "after", 20, pageBody)
	db.Close()
	db2, err := Open(ctx, path, Options{Synchronous: "FULL"})
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	appendMany(t, db2, convs, "again", 20, "x") // the writer works on the reopened file
	check(db2, 32)
}
