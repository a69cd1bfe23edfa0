package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/imserver/imserver/chat"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// waitForLockWait waits until a backend other than conn's waits for a
// lock. (Which statement is not told: for a pipeline, pg_stat_activity
// shows the last one received.)
func waitForLockWait(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var n int
		if err := conn.QueryRow(context.Background(), `SELECT COUNT(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no backend came to wait for a lock")
}

// otherTx opens a connection of its own to url (another node, as far as
// the store can tell) and begins a transaction on it; both end with the
// test.
func otherTx(t *testing.T, url string) (*pgx.Conn, pgx.Tx) {
	t.Helper()
	ctx := context.Background()
	other, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close(ctx) })
	tx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback(ctx) })
	return other, tx
}

// TestLockLastGivesWay builds the one cycle the two lock orders allow: a
// batch of messages holds its conversation's row and waits for the version
// counter, which another node's function batch holds (here a transaction
// of the test's own) while it waits for that row. The messages batch must
// give way within lockLastTimeout, so that the other transaction is not
// the one PostgreSQL aborts, and be rerun with the counter first: the send
// succeeds after the other transaction, which it sees.
func TestLockLastGivesWay(t *testing.T) {
	ctx := context.Background()
	url := pg.NewDB(t)
	db := openTest(t, url, Options{})
	if err := db.CreateGroup(ctx, "g", "g", "u", []string{"v"}); err != nil {
		t.Fatal(err)
	}
	other, tx := otherTx(t, url)
	var v0 int64
	if err := tx.QueryRow(ctx, `SELECT value FROM counters WHERE name = 'version' FOR UPDATE`).Scan(&v0); err != nil {
		t.Fatal(err)
	}

	sent := make(chan error, 1)
	var got chat.Message
	go func() {
		m, _, err := db.Append(ctx, chat.Message{Conv: "g", From: "u", ClientMsgID: "a", Kind: "text", Body: "a"})()
		got = m
		sent <- err
	}()
	waitForLockWait(t, other)

	// The other "node" now wants the row the batch holds: a kick of the
	// sender, which must not be overtaken by the send.
	start := time.Now()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM conversations WHERE id = 'g' FOR UPDATE`); err != nil {
		t.Fatalf("the transaction holding the counter was aborted: %v", err)
	}
	if waited := time.Since(start); waited > time.Second {
		t.Errorf("the row was given up after %v; want under PostgreSQL's deadlock_timeout (1s)", waited)
	}
	if _, err := tx.Exec(ctx, `UPDATE members SET max_seq = 0 WHERE conv_id = 'g' AND user_id = 'u'`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE counters SET value = value + 1 WHERE name = 'version'`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-sent:
		// Rerun after the kick, the send sees it.
		if chat.ErrorCode(err) != chat.ENotMember {
			t.Fatalf("send after the kick: got %v (%+v), want not_member", err, got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the send never finished")
	}
	if n := db.w.reruns.Load(); n != 1 {
		t.Errorf("%d reruns, want 1", n)
	}
	// The writer goes on taking the counter last.
	if _, _, err := db.Append(ctx, chat.Message{Conv: "g", From: "v", ClientMsgID: "b", Kind: "text", Body: "b"})(); err != nil {
		t.Fatal(err)
	}
	var maxSeq, version, counter int64
	if err := db.pool.QueryRow(ctx, `SELECT max_seq, version, (SELECT value FROM counters WHERE name = 'version') FROM conversations WHERE id = 'g'`).Scan(&maxSeq, &version, &counter); err != nil {
		t.Fatal(err)
	}
	if maxSeq != 1 || version != counter || version != v0+2 {
		t.Errorf("max_seq %d, version %d, counter %d; want 1, %d, %d", maxSeq, version, counter, v0+2, v0+2)
	}
}

// TestKickRacesSendsAcrossNodes: two nodes on one database, one sending
// flat out into groups while the other kicks the senders. Whatever the
// interleaving (the sends take the counter last, the kicks first), no
// message of a sender is stored past the end of its range, every send
// either succeeds or is refused as not_member, and versions of the
// conversations are distinct.
func TestKickRacesSendsAcrossNodes(t *testing.T) {
	ctx := context.Background()
	url := pg.NewDB(t)
	a := openTest(t, url, Options{})
	b := openTest(t, url, Options{})
	const groups, senders = 4, 8
	for g := 0; g < groups; g++ {
		var members []string
		for s := 1; s < senders; s++ {
			members = append(members, fmt.Sprintf("s%d", s))
		}
		if err := a.CreateGroup(ctx, fmt.Sprintf("g%d", g), "g", "s0", members); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for g := 0; g < groups; g++ {
		for s := 0; s < senders; s++ {
			wg.Add(1)
			go func(conv, from string) {
				defer wg.Done()
				for i := 0; ; i++ {
					_, _, err := a.Append(ctx, chat.Message{Conv: conv, From: from, ClientMsgID: fmt.Sprint(i), Kind: "text", Body: "x"})()
					if chat.ErrorCode(err) == chat.ENotMember {
						return
					}
					if err != nil {
						errs <- fmt.Errorf("send %s/%s: %w", conv, from, err)
						return
					}
				}
			}(fmt.Sprintf("g%d", g), fmt.Sprintf("s%d", s))
		}
	}
	for s := senders - 1; s >= 1; s-- {
		for g := 0; g < groups; g++ {
			time.Sleep(5 * time.Millisecond)
			if err := b.RemoveMember(ctx, fmt.Sprintf("g%d", g), fmt.Sprintf("s%d", s)); err != nil {
				t.Fatalf("kick: %v", err)
			}
		}
	}
	// s0, the owner, is kicked too, so every sender stops.
	for g := 0; g < groups; g++ {
		if err := b.RemoveMember(ctx, fmt.Sprintf("g%d", g), "s0"); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			t.Errorf("%v (code %s)", err, pe.Code)
		} else {
			t.Error(err)
		}
	}
	var late int
	if err := a.pool.QueryRow(ctx, `SELECT COUNT(*) FROM messages msg JOIN members m ON m.conv_id = msg.conv_id AND m.user_id = msg.sender_id
		WHERE msg.seq > m.max_seq`).Scan(&late); err != nil {
		t.Fatal(err)
	}
	if late != 0 {
		t.Errorf("%d messages stored past the end of their sender's range", late)
	}
	var n, distinct int
	if err := a.pool.QueryRow(ctx, `SELECT COUNT(*), COUNT(DISTINCT version) FROM conversations`).Scan(&n, &distinct); err != nil {
		t.Fatal(err)
	}
	if n != distinct {
		t.Errorf("%d conversations share %d versions", n, distinct)
	}
	t.Logf("reruns: node a %d, node b %d", a.w.reruns.Load(), b.w.reruns.Load())
}

type batchSizes struct {
	mu    sync.Mutex
	sizes []int
}

func (b *batchSizes) Batch(jobs, _ int, _ time.Duration) {
	b.mu.Lock()
	b.sizes = append(b.sizes, jobs)
	b.mu.Unlock()
}

// TestMessagesAndFunctionsApart: messages and function jobs queued
// together go in separate transactions, in the queue's order (a function
// batch takes the counter first and must not wait for conversation rows
// while it holds it).
func TestMessagesAndFunctionsApart(t *testing.T) {
	ctx := context.Background()
	sizes := &batchSizes{}
	db := openTest(t, pg.NewDB(t), Options{BatchDelay: 300 * time.Millisecond, Metrics: sizes})
	if err := db.CreateGroup(ctx, "g", "g", "u", []string{"v"}); err != nil {
		t.Fatal(err)
	}
	sizes.mu.Lock()
	sizes.sizes = nil
	sizes.mu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, 5)
	for i, f := range []func() error{
		func() error {
			_, _, err := db.Append(ctx, chat.Message{Conv: "g", From: "u", ClientMsgID: "1", Kind: "text"})()
			return err
		},
		func() error {
			_, _, err := db.Append(ctx, chat.Message{Conv: "g", From: "v", ClientMsgID: "2", Kind: "text"})()
			return err
		},
		func() error { return db.SaveAcks(ctx, []chat.Ack{{Conv: "g", User: "v", Seq: 1}}) },
		func() error { return db.RemoveMember(ctx, "g", "v") },
		func() error {
			_, _, err := db.Append(ctx, chat.Message{Conv: "g", From: "v", ClientMsgID: "3", Kind: "text"})()
			return err
		},
	} {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = f() }()
		time.Sleep(20 * time.Millisecond) // queue order
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil || errs[2] != nil || errs[3] != nil || chat.ErrorCode(errs[4]) != chat.ENotMember {
		t.Fatalf("got %v; want the last send refused, after the kick", errs)
	}
	sizes.mu.Lock()
	defer sizes.mu.Unlock()
	if fmt.Sprint(sizes.sizes) != "[2 2 1]" {
		t.Errorf("batches of %v jobs; want [2 2 1]", sizes.sizes)
	}
}

// TestQueuedJoinWhileRowsAwaited: while a messages batch waits for its
// conversation's row (held here by another transaction, as another node's
// batch would), messages queued into that conversation join it once the
// row is taken; the first message to another conversation starts the next
// batch. A retry of the first message among them is a duplicate with its
// seq, and seqs follow the queue's order.
func TestQueuedJoinWhileRowsAwaited(t *testing.T) {
	ctx := context.Background()
	url := pg.NewDB(t)
	sizes := &batchSizes{}
	db := openTest(t, url, Options{Metrics: sizes})
	for _, g := range []string{"g", "h"} {
		if err := db.CreateGroup(ctx, g, g, "u", nil); err != nil {
			t.Fatal(err)
		}
	}
	other, tx := otherTx(t, url)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM conversations WHERE id = 'g' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	sizes.mu.Lock()
	sizes.sizes = nil
	sizes.mu.Unlock()

	send := func(conv, cmid string) chat.Pending {
		return db.Append(ctx, chat.Message{Conv: conv, From: "u", ClientMsgID: cmid, Kind: "text", Body: cmid})
	}
	first := send("g", "0")
	waitForLockWait(t, other)
	const n = 150
	var pend []chat.Pending
	for i := 1; i <= n; i++ {
		pend = append(pend, send("g", fmt.Sprint(i)))
	}
	retry := send("g", "0")
	toH := send("h", "x")
	last := send("g", "after")
	time.Sleep(50 * time.Millisecond) // all queued
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	m0, _, err := first()
	if err != nil || m0.Seq != 1 {
		t.Fatalf("first: %+v %v", m0, err)
	}
	for i, p := range pend {
		m, dup, err := p()
		if err != nil || dup || m.Seq != int64(i+2) {
			t.Fatalf("message %d: seq %d dup %v err %v; want seq %d", i+1, m.Seq, dup, err, i+2)
		}
	}
	if m, dup, err := retry(); err != nil || !dup || m.Seq != 1 {
		t.Errorf("retry of the first: seq %d dup %v err %v; want the first's seq 1, dup", m.Seq, dup, err)
	}
	if m, _, err := toH(); err != nil || m.Seq != 1 {
		t.Errorf("message to h: %+v %v", m, err)
	}
	if m, _, err := last(); err != nil || m.Seq != n+2 {
		t.Errorf("message after the one to h: seq %d err %v; want %d", m.Seq, err, n+2)
	}
	sizes.mu.Lock()
	defer sizes.mu.Unlock()
	if len(sizes.sizes) < 2 || sizes.sizes[0] != n+2 {
		t.Errorf("batches of %v jobs; want the first of %d (the waiting message, the %d queued and the retry)", sizes.sizes, n+2, n)
	}
}
