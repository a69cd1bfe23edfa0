package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/imserver/imserver/chat"
)

func openTest(t *testing.T, opts Options) (*DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "test.db")
	db, err := Open(context.Background(), path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, path
}

// TestAppendConcurrentGapless sends from many goroutines into a few groups,
// with every message sent twice (a retry), so that batches have many rounds
// and duplicates: each group's seqs must be 1..n without gaps, and a retry
// must get the seq of the first send.
func TestAppendConcurrentGapless(t *testing.T) {
	ctx := context.Background()
	db, _ := openTest(t, Options{})
	const groups, senders, each = 5, 40, 50
	for g := range groups {
		if err := db.CreateGroup(ctx, fmt.Sprint("g", g), "g", "u0", nil); err != nil {
			t.Fatal(err)
		}
	}
	for s := 1; s < senders; s++ {
		for g := range groups {
			if _, err := db.AddMembers(ctx, fmt.Sprint("g", g), []string{fmt.Sprint("u", s)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, senders)
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				m := chat.Message{Conv: fmt.Sprint("g", (s+i)%groups), From: fmt.Sprint("u", s), ClientMsgID: fmt.Sprint(i), Kind: "text", Body: "hi"}
				first := db.Append(ctx, m)
				retry := db.Append(ctx, m)
				a, dupA, err := first()
				if err != nil {
					errs <- err
					return
				}
				b, dupB, err := retry()
				if err != nil {
					errs <- err
					return
				}
				if dupA || !dupB || a.Seq != b.Seq || b.Body != "hi" {
					errs <- fmt.Errorf("send %v: got (%d, dup %v) then (%d, dup %v)", m, a.Seq, dupA, b.Seq, dupB)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	total := 0
	for g := range groups {
		conv := fmt.Sprint("g", g)
		rows, err := db.readers.Query(`SELECT seq FROM messages WHERE conv = (SELECT key FROM ids WHERE id = ?) ORDER BY seq`, conv)
		if err != nil {
			t.Fatal(err)
		}
		want := int64(1)
		for rows.Next() {
			var s int64
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			if s != want {
				t.Fatalf("%s: got seq %d, want %d", conv, s, want)
			}
			want++
			total++
		}
		rows.Close()
		var maxSeq int64
		if err := db.readers.QueryRow(`SELECT max_seq FROM conversations WHERE id = ?`, conv).Scan(&maxSeq); err != nil {
			t.Fatal(err)
		}
		if maxSeq != want-1 {
			t.Errorf("%s: max_seq %d, want %d", conv, maxSeq, want-1)
		}
	}
	if total != senders*each {
		t.Errorf("got %d messages, want %d", total, senders*each)
	}
}

// TestBatchFailedJobAlone puts messages, a function job that fails after
// writing and one that succeeds into one transaction (BatchDelay holds it
// open): only the failed job's writes are undone.
func TestBatchFailedJobAlone(t *testing.T) {
	ctx := context.Background()
	db, _ := openTest(t, Options{BatchDelay: 200 * time.Millisecond})
	if err := db.CreateGroup(ctx, "g", "g", "u", nil); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	var wg sync.WaitGroup
	results := make([]error, 4)
	run := func(i int, f func() error) {
		wg.Add(1)
		go func() { defer wg.Done(); results[i] = f() }()
	}
	run(0, func() error {
		_, _, err := db.Append(ctx, chat.Message{Conv: "g", From: "u", ClientMsgID: "a", Kind: "text", Body: "a"})()
		return err
	})
	time.Sleep(20 * time.Millisecond) // queue order
	run(1, func() error {
		return db.w.exec(ctx, func(t *wtx) error {
			if _, err := t.ExecContext(t.ctx, `UPDATE conversations SET name = 'changed' WHERE id = ?`, "g"); err != nil {
				return err
			}
			return boom
		})
	})
	time.Sleep(20 * time.Millisecond)
	run(2, func() error {
		return db.CreateUser(ctx, chat.User{ID: "u2", Username: "u2", DisplayName: "u2"}, "hash")
	})
	time.Sleep(20 * time.Millisecond)
	run(3, func() error {
		_, _, err := db.Append(ctx, chat.Message{Conv: "g", From: "u", ClientMsgID: "b", Kind: "text", Body: "b"})()
		return err
	})
	wg.Wait()
	if results[0] != nil || !errors.Is(results[1], boom) || results[2] != nil || results[3] != nil {
		t.Fatalf("got %v", results)
	}
	var name string
	var maxSeq int64
	if err := db.readers.QueryRow(`SELECT name, max_seq FROM conversations WHERE id = 'g'`).Scan(&name, &maxSeq); err != nil {
		t.Fatal(err)
	}
	if name != "g" || maxSeq != 2 {
		t.Errorf("got name %q, max_seq %d; want g, 2", name, maxSeq)
	}
	if _, err := db.UserByID(ctx, "u2"); err != nil {
		t.Error(err)
	}
}

// TestAppendRefused covers the messages a batch refuses alone.
func TestAppendRefused(t *testing.T) {
	ctx := context.Background()
	db, _ := openTest(t, Options{})
	if err := db.CreateGroup(ctx, "g", "g", "u", []string{"v"}); err != nil {
		t.Fatal(err)
	}
	if err := db.RemoveMember(ctx, "g", "v"); err != nil {
		t.Fatal(err)
	}
	ok := db.Append(ctx, chat.Message{Conv: "g", From: "u", ClientMsgID: "1", Kind: "text", Body: "x"})
	kicked := db.Append(ctx, chat.Message{Conv: "g", From: "v", ClientMsgID: "1", Kind: "text", Body: "x"})
	missing := db.Append(ctx, chat.Message{Conv: "nope", From: "u", ClientMsgID: "1", Kind: "text", Body: "x"})
	if m, _, err := ok(); err != nil || m.Seq != 1 {
		t.Errorf("member: got seq %d, %v", m.Seq, err)
	}
	var e *chat.Error
	if _, _, err := kicked(); !errors.As(err, &e) || e.Code != chat.ENotMember {
		t.Errorf("kicked: got %v", err)
	}
	if _, _, err := missing(); !errors.As(err, &e) || (e.Code != chat.ENotFound && e.Code != chat.ENotMember) {
		t.Errorf("no conversation: got %v", err)
	}
	if m, _, err := db.Append(ctx, chat.Message{Conv: "g", From: "u", ClientMsgID: "2", Kind: "text", Body: "x"})(); err != nil || m.Seq != 2 {
		t.Errorf("next: got seq %d, %v", m.Seq, err)
	}
}

// TestSeqsAfterReopen checks that the in-process allocator resumes above
// what is stored.
func TestSeqsAfterReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "test.db")
	for round := range 2 {
		db, err := Open(ctx, path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if round == 0 {
			if err := db.CreateGroup(ctx, "g", "g", "u", nil); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 3 {
			m, _, err := db.Append(ctx, chat.Message{Conv: "g", From: "u", ClientMsgID: fmt.Sprint(round, i), Kind: "text", Body: "x"})()
			if want := int64(round*3 + i + 1); err != nil || m.Seq != want {
				t.Fatalf("round %d: got seq %d, %v; want %d", round, m.Seq, err, want)
			}
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWtxQueries covers the small database/sql-like API the writer's jobs
// use on the driver connection.
func TestWtxQueries(t *testing.T) {
	ctx := context.Background()
	db, _ := openTest(t, Options{})
	err := db.w.exec(ctx, func(t *wtx) error {
		if _, err := t.ExecContext(t.ctx, `CREATE TEMP TABLE x (s TEXT, i INTEGER, b BLOB, n TEXT)`); err != nil {
			return err
		}
		res, err := t.ExecContext(t.ctx, `INSERT INTO x VALUES (?, ?, ?, ?), (?, ?, ?, ?)`, "a", 1, []byte{1, 2}, nil, "b", int64(2), []byte(nil), "n")
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != 2 {
			return fmt.Errorf("rows affected: %d, %v", n, err)
		}
		var s string
		var i int
		var i64 int64
		var b []byte
		var n sql.NullString
		if err := t.QueryRowContext(t.ctx, `SELECT s, i, i, b, n FROM x WHERE s = ?`, "a").Scan(&s, &i, &i64, &b, &n); err != nil {
			return err
		}
		if s != "a" || i != 1 || i64 != 1 || string(b) != "\x01\x02" || n.Valid {
			return fmt.Errorf("got %q %d %d %v %v", s, i, i64, b, n)
		}
		if err := t.QueryRowContext(t.ctx, `SELECT s FROM x WHERE s = 'zz'`).Scan(&s); !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("no row: got %v", err)
		}
		if err := t.QueryRowContext(t.ctx, `SELECT n FROM x WHERE s = 'a'`).Scan(&s); err == nil {
			return errors.New("NULL into a string: no error")
		}
		st, err := t.stmt(`SELECT s FROM x WHERE i >= ? ORDER BY i`)
		if err != nil {
			return err
		}
		for range 2 { // a prepared statement is reused
			if err := st.QueryRowContext(t.ctx, 2).Scan(&s); err != nil || s != "b" {
				return fmt.Errorf("stmt: got %q, %v", s, err)
			}
		}
		rows, err := t.QueryContext(t.ctx, `SELECT s FROM x ORDER BY s`)
		if err != nil {
			return err
		}
		var all []string
		for rows.Next() {
			if err := rows.Scan(&s); err != nil {
				return err
			}
			all = append(all, s)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if strings.Join(all, ",") != "a,b" {
			return fmt.Errorf("rows: got %v", all)
		}
		_, err = t.ExecContext(t.ctx, `DROP TABLE x`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// openSmallCheckpoints opens a database whose checkpointer has thresholds
// a tenth of the usual, so that tests reach them quickly.
func openSmallCheckpoints(t *testing.T) (*DB, string) {
	db, path := openTest(t, Options{Synchronous: "NORMAL"})
	// Before the first write, which orders these before their reads.
	db.ckpt.checkpointPages /= 10
	db.ckpt.restartPages /= 10
	db.ckpt.maxPendingPages /= 10
	if err := db.CreateGroup(context.Background(), "g", "g", "u", nil); err != nil {
		t.Fatal(err)
	}
	return db, path
}

// pageBody makes a message take about a page.
var pageBody = strings.Repeat("x", 3000)

// TestCheckpointerBoundsWAL writes far more than restartPages while the
// writer commits back to back: the WAL must be rewound instead of growing.
func TestCheckpointerBoundsWAL(t *testing.T) {
	ctx := context.Background()
	db, path := openSmallCheckpoints(t)
	n := int(20 * db.ckpt.restartPages)
	var wg sync.WaitGroup
	for s := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := s; i < n; i += 16 {
				if _, _, err := db.Append(ctx, chat.Message{Conv: "g", From: "u", ClientMsgID: fmt.Sprint(i), Kind: "text", Body: pageBody})(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	fi, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	// Past restartPages, the WAL is rewound after a checkpoint or two and
	// a commit (about twice restartPages under this load): far shorter
	// than what was written.
	if max := 4 * db.ckpt.restartPages * 4120; fi.Size() > max {
		t.Errorf("WAL is %d bytes after %d pages were written, want at most %d", fi.Size(), n, max)
	}
}

// TestCheckpointerBackpressure holds off the checkpoints (as a slow disk
// would): the writer must wait rather than grow the WAL past
// maxPendingPages.
func TestCheckpointerBackpressure(t *testing.T) {
	ctx := context.Background()
	db, path := openSmallCheckpoints(t)
	n := int(3 * db.ckpt.maxPendingPages)
	db.ckpt.mu.Lock()
	done := make(chan error, 1)
	go func() {
		for i := range n {
			if _, _, err := db.Append(ctx, chat.Message{Conv: "g", From: "u", ClientMsgID: fmt.Sprint(i), Kind: "text", Body: pageBody})(); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	time.Sleep(time.Second)
	fi, err := os.Stat(path + "-wal")
	db.ckpt.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	// Each message is a commit of its own here: its page, the
	// conversation's and the sender's.
	if max := (3*db.ckpt.maxPendingPages + 100) * 4120; fi.Size() > max {
		t.Errorf("WAL is %d bytes while checkpoints were held off, want at most %d", fi.Size(), max)
	}
	select {
	case err := <-done:
		if err == nil {
			err = errors.New("all messages were stored while checkpoints were held off")
		}
		t.Fatal(err)
	default:
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestWriterTempStoreInMemory: the writer's statement journals, which
// hold pages as they were before an erasing statement, never go to a file.
func TestWriterTempStoreInMemory(t *testing.T) {
	db, _ := openTest(t, Options{})
	var mode int
	err := db.w.exec(context.Background(), func(t *wtx) error {
		return t.QueryRowContext(t.ctx, `PRAGMA temp_store`).Scan(&mode)
	})
	if err != nil || mode != 2 {
		t.Fatalf("temp_store %d (%v), want 2 (memory)", mode, err)
	}
}

// TestFinishManyConversations: one batch of sends into more conversations
// than one statement takes (finishMessages updates 64 rows a statement,
// the last one padded) moves every conversation's max_seq and version and
// counts every sender's texts in its own_unread, and changes no read
// marker or ack (a send moves none).
func TestFinishManyConversations(t *testing.T) {
	ctx := context.Background()
	db, _ := openTest(t, Options{})
	const n = 70 // 64 + 6, padded to 16
	for i := range n + 1 {
		if err := db.CreateGroup(ctx, fmt.Sprint("g", i), "g", "u", []string{"v"}); err != nil {
			t.Fatal(err)
		}
	}
	var before int64
	if err := db.readers.QueryRow(`SELECT version FROM conversations WHERE id = 'g70'`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	// Held up behind a job until all are queued: one batch.
	release := make(chan struct{})
	held := make(chan struct{})
	go db.w.exec(ctx, func(*wtx) error { close(held); <-release; return nil })
	<-held
	var pend []chat.Pending
	for i := range n {
		for k := range 2 {
			pend = append(pend, db.Append(ctx, chat.Message{Conv: fmt.Sprint("g", i), From: "u", ClientMsgID: fmt.Sprint(i, "-", k), Kind: chat.KindText, Body: "hi"}))
		}
	}
	close(release)
	for _, p := range pend {
		if _, _, err := p(); err != nil {
			t.Fatal(err)
		}
	}
	versions := map[int64]bool{}
	prev := before
	for i := range n + 1 {
		conv := fmt.Sprint("g", i)
		var maxSeq, version, read, ack, own, otherRead int64
		if err := db.readers.QueryRow(`SELECT max_seq, version FROM conversations WHERE id = ?`, conv).Scan(&maxSeq, &version); err != nil {
			t.Fatal(err)
		}
		if err := db.readers.QueryRow(`SELECT read_seq, last_ack_seq, own_unread FROM members WHERE conv_id = ? AND user_id = 'u'`, conv).Scan(&read, &ack, &own); err != nil {
			t.Fatal(err)
		}
		if err := db.readers.QueryRow(`SELECT read_seq FROM members WHERE conv_id = ? AND user_id = 'v'`, conv).Scan(&otherRead); err != nil {
			t.Fatal(err)
		}
		want := int64(2)
		if i == n {
			want = 0 // no send: untouched
			if version != before {
				t.Errorf("%s: version moved from %d to %d without a send", conv, before, version)
			}
		} else {
			// The sends were queued g0 first: versions follow that order.
			if versions[version] || version <= prev {
				t.Errorf("%s: version %d repeated or not after %d (the one before)", conv, version, prev)
			}
			versions[version] = true
			prev = version
		}
		if maxSeq != want || own != want || read != 0 || ack != 0 || otherRead != 0 {
			t.Errorf("%s: max_seq %d, sender own_unread %d, read/ack %d/%d, other member read %d; want %d, %d, 0/0, 0", conv, maxSeq, own, read, ack, otherRead, want, want)
		}
	}
}
