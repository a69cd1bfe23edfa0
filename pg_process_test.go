package main

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/imserver/imserver/internal/pgtest"
	"github.com/jackc/pgx/v5"
)

// serveExits runs `imserver serve --db db` and returns its output once it
// exits; it fails the test if serve is still running after 30 s.
func serveExits(t *testing.T, db string) (string, error) {
	t.Helper()
	cmd := exec.Command(serverBin, "serve", "--addr", freeAddr(t), "--db", db)
	cmd.Env = serverEnv()
	done := make(chan struct{})
	var out []byte
	var err error
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("serve kept running: %s", out)
	}
	return string(out), err
}

// TestServePostgresStartErrors: a wrong password, a database that does not
// exist, a host that does not answer and a schema a newer imserver made
// each stop `imserver serve` with a message that says which, and never
// with the password in it.
func TestServePostgresStartErrors(t *testing.T) {
	pg := testPostgres(t)
	newer := pg.NewDB(t)
	if out, err := exec.Command(serverBin, "user", "list", "--db", newer).CombinedOutput(); err != nil {
		t.Fatalf("creating the schema: %v %s", err, out)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, newer)
	if err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (9999, '9999_future.sql', 0)`)
	conn.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, db, want string }{
		{"wrong password", "postgres://postgres:wrongpw@" + pg.HostPort() + "/postgres?sslmode=disable", "password authentication failed"},
		{"no such database", "postgres://postgres:" + pgtest.Password + "@" + pg.HostPort() + "/nosuchdb?sslmode=disable", `database "nosuchdb" does not exist`},
		{"nothing listening", "postgres://postgres:wrongpw@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=2", "cannot connect"},
		{"newer schema", newer, "newer than this imserver knows ("},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := serveExits(t, tc.db)
			if err == nil || !strings.Contains(out, tc.want) {
				t.Fatalf("serve: err %v, output %q, want it to say %q", err, out, tc.want)
			}
			if strings.Contains(out, "wrongpw") || strings.Contains(out, pgtest.Password) {
				t.Fatalf("the output shows a password: %q", out)
			}
		})
	}
}

// TestServePostgresRestartUnderLoad restarts PostgreSQL (an operator's
// fast shutdown, 4 s down) under a server process that keeps taking sends
// over HTTP and WebSocket: sends answer `unavailable` while it is down and
// /healthz says so, sending resumes without restarting imserver, every
// acked message is stored once with its seq, and the retry of every send
// answered `unavailable` is stored once (its commit may have happened
// before the connection was cut: the retry then answers with that seq).
func TestServePostgresRestartUnderLoad(t *testing.T) {
	pg, err := pgtest.Start("") // its own: the restart would cut other tests'
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Stop)
	dir := t.TempDir()
	p := startLogged(t, "A", pg.NewDB(t), writeConfig(t, dir, "limits:\n  send_rate: 1000000\n  send_burst: 1000000\n"))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	alice, bob := registerUser(t, p, "alice"), registerUser(t, p, "bob")
	group := newGroup(t, p, alice, bob)
	ws := dialWS(t, ctx, p, "alice", alice.Token)

	snd := startSenders(p, alice.Token, ws, group, 50*time.Millisecond)
	count := snd.count
	waitFor := func(what string, timeout time.Duration, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(timeout)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %v", what, timeout)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	unavailable := func(res sendResult) bool { return res.Code == "unavailable" && (res.Status == 503 || res.Status == 0) }

	waitFor("200 sends before the restart", 30*time.Second, func() bool { return count(sendResult.ok) >= 200 })
	downAt := time.Now()
	restarted := make(chan error, 1)
	go func() { restarted <- pg.Restart(4 * time.Second) }()
	waitFor("`unavailable` answers while PostgreSQL is down", 10*time.Second, func() bool {
		return count(func(r sendResult) bool { return unavailable(r) && r.Start.After(downAt) }) >= 5
	})
	waitFor("/healthz 503 while PostgreSQL is down", 10*time.Second, func() bool {
		code, h, err := health(p)
		return err == nil && code == 503 && strings.Contains(h.Checks["postgres"], "writes failing")
	})
	// /healthz needs no token: it names the condition, not the database's
	// address or user (those are in the log).
	if _, h, err := health(p); err != nil || strings.Contains(h.Checks["postgres"], "user=") || strings.Contains(h.Checks["postgres"], "127.0.0.1") {
		t.Errorf("/healthz while PostgreSQL is down: %+v %v", h, err)
	}
	if err := <-restarted; err != nil {
		t.Fatalf("restarting PostgreSQL: %v", err)
	}
	upAt := time.Now()
	waitFor("100 sends after the restart", 30*time.Second, func() bool {
		return count(func(r sendResult) bool { return r.ok() && r.Start.After(upAt) }) >= 100
	})
	results := snd.halt()
	waitFor("/healthz 200 after the restart", 10*time.Second, func() bool {
		code, _, err := health(p)
		return err == nil && code == 200
	})
	if closed, err := ws.isClosed(); closed {
		t.Errorf("the sender's socket was closed during the outage: %v", err)
	}

	var unav []sendResult
	other := map[string]int{}
	for _, res := range results {
		switch {
		case res.ok():
		case unavailable(res):
			unav = append(unav, res)
		default:
			other[fmt.Sprintf("status %d code %q err %v", res.Status, res.Code, res.Err)]++
		}
	}
	for k, n := range other {
		t.Errorf("%d sends answered neither success nor unavailable: %s", n, k)
	}
	t.Logf("%d sends, %d answered unavailable, PostgreSQL down for %v", len(results), len(unav), upAt.Sub(downAt).Round(time.Millisecond))
	// Every send answered unavailable is retried: stored once, whether its
	// first try committed or not.
	retried := make([]sendResult, 0, len(unav))
	for _, res := range unav {
		rr := httpSend(p, alice.Token, group, res.ID, "x")
		if !rr.ok() {
			t.Errorf("retry of %s: status %d code %q err %v", res.ID, rr.Status, rr.Code, rr.Err)
		}
		retried = append(retried, rr)
	}
	stored := fetchAll(t, p.proc, alice.Token, group)
	byID := checkStored(t, "after the restart", stored, append(append([]sendResult(nil), results...), retried...))
	if want := count(sendResult.ok) + len(unav); len(byID) != want {
		t.Errorf("%d messages stored, want %d (acked and retried)", len(byID), want)
	}
}

// TestHealthzHidesPostgresDetails: /healthz needs no token, so when
// PostgreSQL refuses the server's connections (here a password rotated
// under it) it says the database is unavailable and names neither the
// user, the database nor the host; the log has PostgreSQL's reason.
func TestHealthzHidesPostgresDetails(t *testing.T) {
	pg, err := pgtest.Start("") // its own: its password is changed
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Stop)
	p := startLogged(t, "A", pg.NewDB(t), writeConfig(t, t.TempDir(), ""))
	if code, _, err := health(p); err != nil || code != 200 {
		t.Fatalf("/healthz at the start: %d %v", code, err)
	}
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, pg.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	for _, q := range []string{`ALTER ROLE postgres PASSWORD 'rotated'`,
		`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'`} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// The first answers come from connections PostgreSQL cut, the next
	// from new ones it refuses for the password: look at both.
	failed := 0
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		code, h, err := health(p)
		if err != nil || code != 503 {
			continue
		}
		failed++
		reason := h.Checks["postgres"]
		for _, leak := range []string{"user=", "database=", "127.0.0.1", "SQLSTATE", "password"} {
			if strings.Contains(reason, leak) {
				t.Fatalf("/healthz names %q: %q", leak, reason)
			}
		}
	}
	if failed == 0 {
		t.Fatal("/healthz never failed with PostgreSQL refusing the server")
	}
}
