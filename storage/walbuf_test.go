package storage

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/imserver/imserver/chat"
	"modernc.org/libc"
	sqlite3 "modernc.org/sqlite/lib"
)

// writeCalls is the process's count of write system calls so far
// (/proc/self/io syscw).
func writeCalls(t testing.TB) int64 {
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

// TestWALBufSharedFile: two connections on one file through walBufVFS
// (as two processes' writers are), the first running a transaction that
// spills frames to the WAL and then rolls back, the second committing at
// the offsets those frames took, then the first committing again. The
// rolled-back frames must never reach the file over the second one's.
func TestWALBufSharedFile(t *testing.T) {
	ctx := context.Background()
	if err := registerWalBuf(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "shared.db")
	open := func(cacheKiB int) *sql.DB {
		db, err := sql.Open("sqlite", "file:"+path+"?vfs="+walBufVFS+"&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=busy_timeout(10000)"+
			"&_pragma=wal_autocheckpoint(0)&_pragma=cache_size(-"+strconv.Itoa(cacheKiB)+")")
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(1)
		t.Cleanup(func() { db.Close() })
		return db
	}
	a, b := open(64), open(16384)
	if _, err := a.ExecContext(ctx, `CREATE TABLE t (name TEXT PRIMARY KEY, value TEXT)`); err != nil {
		t.Fatal(err)
	}
	insert := func(db *sql.DB, prefix string, n int, commit bool) {
		t.Helper()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			name := fmt.Sprint(prefix, i)
			if _, err := tx.ExecContext(ctx, `INSERT INTO t (name, value) VALUES (?, ?)`, name, name+pageBody); err != nil {
				t.Fatal(err)
			}
		}
		if commit {
			err = tx.Commit()
		} else {
			err = tx.Rollback()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for round := range 3 {
		insert(a, fmt.Sprint("rolled-back-", round, "-"), 60, false)
		insert(b, fmt.Sprint("b", round, "-"), 20, true)
		insert(a, fmt.Sprint("a", round, "-"), 5, true)
	}
	a.Close()
	b.Close()
	fresh := open(16384)
	var check string
	if err := fresh.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity_check: %q %v", check, err)
	}
	for _, c := range []struct {
		like string
		want int
	}{{"rolled-back-%", 0}, {"b_-%", 60}, {"a_-%", 15}} {
		rows, err := fresh.QueryContext(ctx, `SELECT name, value FROM t WHERE name LIKE ?`, c.like)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for rows.Next() {
			var name, value string
			if err := rows.Scan(&name, &value); err != nil {
				t.Fatal(err)
			}
			if value != name+pageBody {
				t.Fatalf("%s holds %.40q…", name, value)
			}
			n++
		}
		rows.Close()
		if n != c.want {
			t.Fatalf("%d rows like %q, want %d", n, c.like, c.want)
		}
	}
}

// fakeWAL is the file behind TestWALBufFlushFails: the bytes written, the
// write calls made, and the call that fails (0 for none).
var fakeWAL struct {
	data          []byte
	calls, failAt int
}

func fakeWALWrite(_ *libc.TLS, _, buf uintptr, n int32, off int64) int32 {
	fakeWAL.calls++
	if fakeWAL.calls == fakeWAL.failAt {
		return sqlite3.SQLITE_FULL
	}
	if need := int(off) + int(n); need > len(fakeWAL.data) {
		fakeWAL.data = append(fakeWAL.data, make([]byte, need-len(fakeWAL.data))...)
	}
	copy(fakeWAL.data[off:], unsafe.Slice((*byte)(cptr(buf)), n))
	return sqlite3.SQLITE_OK
}

// TestWALBufFlushFails: frames are gathered without a write call; a flush
// that fails midway (a full disk) keeps what it did not write, and the
// next flush writes exactly the bytes SQLite was told were written.
func TestWALBufFlushFails(t *testing.T) {
	if err := registerWalBuf(); err != nil {
		t.Fatal(err)
	}
	tls := libc.NewTLS()
	defer tls.Close()
	methods, err := cAlloc(tls, int(unsafe.Sizeof(sqlite3.Tsqlite3_io_methods{})))
	if err != nil {
		t.Fatal(err)
	}
	defer libc.Xfree(tls, methods)
	*(*func(*libc.TLS, uintptr, uintptr, int32, int64) int32)(unsafe.Pointer(&(*sqlite3.Tsqlite3_io_methods)(cptr(methods)).FxWrite)) = fakeWALWrite
	f, err := cAlloc(tls, int(walBufExtra)+int(unsafe.Sizeof(walFile{})))
	if err != nil {
		t.Fatal(err)
	}
	defer libc.Xfree(tls, f)
	w := walState(f)
	*w = walFile{methods: methods}
	defer func() {
		if w.buf != 0 {
			libc.Xfree(tls, w.buf)
		}
	}()
	const frame = 24 + 4096
	src, err := cAlloc(tls, frame)
	if err != nil {
		t.Fatal(err)
	}
	defer libc.Xfree(tls, src)
	frameBytes := unsafe.Slice((*byte)(cptr(src)), frame)
	want := make([]byte, 32)
	for i := range 100 { // about 400 KiB: four pieces of walWriteMax
		for k := range frameBytes {
			frameBytes[k] = byte(i + k)
		}
		// A header and its page, as SQLite writes them.
		off := int64(32 + i*frame)
		if rc := walBufWrite(tls, f, src, 24, off); rc != sqlite3.SQLITE_OK {
			t.Fatalf("write: %d", rc)
		}
		if rc := walBufWrite(tls, f, src+24, frame-24, off+24); rc != sqlite3.SQLITE_OK {
			t.Fatalf("write: %d", rc)
		}
		want = append(want, frameBytes...)
	}
	if fakeWAL.calls != 0 {
		t.Fatalf("%d write calls before the sync: nothing was gathered", fakeWAL.calls)
	}
	fakeWAL.failAt = 2
	if rc := w.flush(tls, f); rc != sqlite3.SQLITE_FULL {
		t.Fatalf("flush with a full disk: %d, want SQLITE_FULL", rc)
	}
	if w.start != 32+walWriteMax || w.end != int64(len(want)) {
		t.Fatalf("after the failure [%d, %d) is kept, want [%d, %d)", w.start, w.end, 32+walWriteMax, len(want))
	}
	fakeWAL.failAt = 0
	if rc := w.flush(tls, f); rc != sqlite3.SQLITE_OK {
		t.Fatalf("flush: %d", rc)
	}
	if !bytes.Equal(fakeWAL.data[32:], want[32:]) {
		t.Fatal("the file does not hold the bytes written")
	}
	if w.start != w.end {
		t.Fatalf("[%d, %d) still gathered after the flush", w.start, w.end)
	}
}
