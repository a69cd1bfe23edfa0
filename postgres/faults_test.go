package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/imserver/imserver/chat"
	"github.com/imserver/imserver/internal/pgtest"
	"github.com/jackc/pgx/v5"
)

// TestBatchFailedJobAlone queues messages, a function job that fails after
// writing and one that succeeds in one batch (BatchDelay holds it open;
// the function jobs share a transaction, the messages go apart): only the
// failed job's writes are undone (SAVEPOINT).
func TestBatchFailedJobAlone(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, pg.NewDB(t), Options{BatchDelay: 200 * time.Millisecond})
	if err := db.CreateGroup(ctx, "g", "g", "u", nil); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	var wg sync.WaitGroup
	results := make([]error, 5)
	run := func(i int, f func() error) {
		wg.Add(1)
		go func() { defer wg.Done(); results[i] = f() }()
		time.Sleep(20 * time.Millisecond) // queue order
	}
	run(0, func() error {
		_, _, err := db.Append(ctx, chat.Message{Conv: "g", From: "u", ClientMsgID: "a", Kind: "text", Body: "a"})()
		return err
	})
	run(1, func() error {
		return db.w.exec(ctx, func(t *wtx) error {
			if _, err := t.Exec(`UPDATE conversations SET name = 'changed' WHERE id = $1`, "g"); err != nil {
				return err
			}
			return boom
		})
	})
	// A statement error (a unique violation) aborts the transaction in
	// PostgreSQL: the savepoint must bring it back.
	run(2, func() error {
		return db.CreateUser(ctx, chat.User{ID: "u3", Username: "U2", DisplayName: "x"}, "h")
	})
	run(3, func() error {
		return db.CreateUser(ctx, chat.User{ID: "u2", Username: "u2", DisplayName: "u2"}, "hash")
	})
	run(4, func() error {
		_, _, err := db.Append(ctx, chat.Message{Conv: "g", From: "u", ClientMsgID: "b", Kind: "text", Body: "b"})()
		return err
	})
	wg.Wait()
	// Job 2 came first with the name, so job 3 is the one refused.
	if results[0] != nil || !errors.Is(results[1], boom) || results[2] != nil || chat.ErrorCode(results[3]) != chat.EConflict || results[4] != nil {
		t.Fatalf("got %v", results)
	}
	var name string
	var maxSeq int64
	if err := db.pool.QueryRow(ctx, `SELECT name, max_seq FROM conversations WHERE id = 'g'`).Scan(&name, &maxSeq); err != nil {
		t.Fatal(err)
	}
	if name != "g" || maxSeq != 2 {
		t.Errorf("got name %q, max_seq %d; want g, 2", name, maxSeq)
	}
	if _, err := db.UserByID(ctx, "u3"); err != nil {
		t.Error(err)
	}
}

// TestNewerSchemaRefused: a database migrated by a newer imserver is
// refused at start, saying why.
func TestNewerSchemaRefused(t *testing.T) {
	ctx := context.Background()
	url := pg.NewDB(t)
	db, err := Open(ctx, url, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.pool.Exec(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (9999, '9999_future.sql', 0)`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	_, err = Open(ctx, url, Options{})
	if err == nil || !strings.Contains(err.Error(), "newer than this imserver knows") || !strings.Contains(err.Error(), "9999") {
		t.Fatalf("got %v, want a refusal naming the newer version", err)
	}
}

// TestOpenErrors: a wrong URL, password, port or database says so at
// start, without the password.
func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ url, want string }{
		{"postgres://postgres:wrong@" + pg.HostPort() + "/postgres?sslmode=disable", "password authentication failed"},
		{"postgres://postgres:" + pgtest.Password + "@" + pg.HostPort() + "/nosuchdb?sslmode=disable", `database "nosuchdb" does not exist`},
		{"postgres://postgres:secret@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=2", "cannot connect"},
		{"postgres://postgres:secret@host:notaport/db", "bad database URL"},
	} {
		_, err := Open(ctx, tc.url, Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.url, err, tc.want)
		} else if strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "wrong") {
			t.Errorf("%s: the error shows the password: %v", tc.url, err)
		}
	}
}

// TestRestartUnderLoad restarts PostgreSQL while senders keep sending and
// retrying: sends answer `unavailable` while it is down, nothing acked is
// lost or stored twice, seqs stay gapless, and work resumes without
// reopening the store.
func TestRestartUnderLoad(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, pg.NewDB(t), Options{})
	const senders = 8
	members := make([]string, senders)
	for i := range members {
		members[i] = fmt.Sprint("u", i)
	}
	if err := db.CreateGroup(ctx, "g", "g", "owner", members); err != nil {
		t.Fatal(err)
	}
	var (
		mu          sync.Mutex
		acked       = map[string]int64{} // client_msg_id -> seq
		unavailable int
		stop        = make(chan struct{})
		wg          sync.WaitGroup
		errs        = make(chan error, senders)
	)
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				m := chat.Message{Conv: "g", From: members[s], ClientMsgID: fmt.Sprint(s, "-", i), Kind: "text", Body: "x"}
				// Retry as a client does, with the same client_msg_id.
				for {
					got, _, err := db.Append(ctx, m)()
					if err == nil {
						mu.Lock()
						acked[m.ClientMsgID] = got.Seq
						mu.Unlock()
						break
					}
					if chat.ErrorCode(err) != chat.EUnavailable {
						errs <- fmt.Errorf("send %s: %v (code %s), want unavailable", m.ClientMsgID, err, chat.ErrorCode(err))
						return
					}
					mu.Lock()
					unavailable++
					mu.Unlock()
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	if err := pg.Restart(time.Second); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	before := len(acked)
	mu.Unlock()
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if unavailable == 0 {
		t.Error("no send answered unavailable while PostgreSQL was down")
	}
	if len(acked) <= before {
		t.Errorf("no send succeeded after the restart (%d acked before, %d after)", before, len(acked))
	}
	p, err := db.Messages(ctx, "g", "owner", chat.PageQuery{Limit: chat.MaxPageLimit})
	if err != nil {
		t.Fatal(err)
	}
	stored := map[string]int64{}
	for {
		for i, m := range p.Messages {
			if want := int64(len(stored) + 1); m.Seq != want && i >= 0 {
				t.Fatalf("seq %d where %d was due: a gap or a repeat", m.Seq, want)
			}
			if _, dup := stored[m.ClientMsgID]; dup {
				t.Fatalf("%s stored twice", m.ClientMsgID)
			}
			stored[m.ClientMsgID] = m.Seq
		}
		if p.Completed {
			break
		}
		if p, err = db.Messages(ctx, "g", "owner", chat.PageQuery{After: int64(len(stored)), Limit: chat.MaxPageLimit}); err != nil {
			t.Fatal(err)
		}
	}
	for id, seq := range acked {
		if stored[id] != seq {
			t.Errorf("%s acked with seq %d, stored with %d", id, seq, stored[id])
		}
	}
	t.Logf("%d acked, %d stored, %d unavailable answers", len(acked), len(stored), unavailable)
}

// TestUnstorableTextAlone: text PostgreSQL cannot hold (a NUL byte) fails
// its own message, not the batch it shares.
func TestUnstorableTextAlone(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, pg.NewDB(t), Options{BatchDelay: 100 * time.Millisecond})
	if err := db.CreateGroup(ctx, "g", "g", "u", nil); err != nil {
		t.Fatal(err)
	}
	a := db.Append(ctx, chat.Message{Conv: "g", From: "u", ClientMsgID: "a", Kind: "text", Body: "a"})
	bad := db.Append(ctx, chat.Message{Conv: "g", From: "u", ClientMsgID: "b", Kind: "text", Body: "nul\x00"})
	badID := db.Append(ctx, chat.Message{Conv: "g\x00", From: "u", ClientMsgID: "c", Kind: "text", Body: "c"})
	c := db.Append(ctx, chat.Message{Conv: "g", From: "u", ClientMsgID: "c", Kind: "text", Body: "c"})
	if m, _, err := a(); err != nil || m.Seq != 1 {
		t.Errorf("a: %d %v", m.Seq, err)
	}
	for _, p := range []chat.Pending{bad, badID} {
		if _, _, err := p(); chat.ErrorCode(err) != chat.EBadRequest {
			t.Errorf("unstorable: got %v, want bad_request", err)
		}
	}
	if m, _, err := c(); err != nil || m.Seq != 2 {
		t.Errorf("c: %d %v", m.Seq, err)
	}
	err := db.CreateUser(ctx, chat.User{ID: "x", Username: "x\x00", DisplayName: "x"}, "h")
	if chat.ErrorCode(err) != chat.EBadRequest {
		t.Errorf("user with a NUL: got %v", err)
	}
}

// TestTooManyConnections: a PostgreSQL that refuses connections (here the
// role's connection limit) makes reads and writes answer `unavailable`,
// not internal errors, and the store works again once connections free up.
func TestTooManyConnections(t *testing.T) {
	ctx := context.Background()
	admin, err := Open(ctx, pg.NewDB(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	role := fmt.Sprintf("lim%d", time.Now().UnixNano()%1e9)
	for _, sql := range []string{
		`CREATE ROLE ` + role + ` LOGIN PASSWORD 'pw' CONNECTION LIMIT 2`,
		`CREATE SCHEMA ` + role + ` AUTHORIZATION ` + role,
	} {
		if _, err := admin.pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		admin.pool.Exec(ctx, `DROP SCHEMA `+role+` CASCADE`)
		admin.pool.Exec(ctx, `DROP ROLE `+role)
	})
	url := fmt.Sprintf("postgres://%s:pw@%s/postgres?sslmode=disable&search_path=%s", role, pg.HostPort(), role)
	db := openTest(t, url, Options{})
	if err := db.CreateGroup(ctx, "g", "g", "u", nil); err != nil {
		t.Fatal(err)
	}
	// Hold every connection the role may have, the store's own closed.
	db.pool.Reset()
	var held []*pgx.Conn
	for {
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			break
		}
		held = append(held, c)
	}
	_, readErr := db.Messages(ctx, "g", "u", chat.PageQuery{Limit: 10})
	_, _, sendErr := db.Append(ctx, chat.Message{Conv: "g", From: "u", ClientMsgID: "1", Kind: "text", Body: "x"})()
	for _, c := range held {
		c.Close(ctx)
	}
	if chat.ErrorCode(readErr) != chat.EUnavailable || chat.ErrorCode(sendErr) != chat.EUnavailable {
		t.Errorf("with no connection to be had: read %v, send %v; want unavailable (held %d connections)", readErr, sendErr, len(held))
	}
	// A closed connection's backend leaves PostgreSQL's count a moment
	// after the client let go of it: the first send may still be refused
	// (unavailable, which a client retries with the same client_msg_id).
	deadline := time.Now().Add(10 * time.Second)
	for {
		m, _, err := db.Append(ctx, chat.Message{Conv: "g", From: "u", ClientMsgID: "1", Kind: "text", Body: "x"})()
		if err == nil && m.Seq == 1 {
			break
		}
		if chat.ErrorCode(err) != chat.EUnavailable || time.Now().After(deadline) {
			t.Fatalf("once connections are free: seq %d, %v", m.Seq, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
