package server_test

// Hostile and failing conditions (PROTOCOL.md v1.2): a database that cannot
// be written, bodies that trickle, clients that never read, sockets opened
// and dropped by the thousand, sessions and tickets guessed, reused or
// expired.

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/imserver/imserver/chat"
)

// writerPragma sets a pragma on the server's write connection.
func (ts *testServer) writerPragma(t testing.TB, pragma string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := ts.db.ExecOnWriterForTest(ctx, "PRAGMA "+pragma); err != nil {
		t.Fatalf("PRAGMA %s: %v", pragma, err)
	}
}

// health returns /healthz's status and body.
func (ts *testServer) health(t testing.TB) response {
	t.Helper()
	r := ts.do(t, "GET", "/healthz", "", nil)
	if _, ok := r.JSON["checks"].(map[string]any); !ok || r.JSON["status"] == nil {
		t.Fatalf("healthz without status and checks: %s", r)
	}
	return r
}

// wantUnavailable checks a 503 unavailable answer with a Retry-After header.
func wantUnavailable(t testing.TB, what string, r response) {
	t.Helper()
	if r.Status != http.StatusServiceUnavailable || r.errorCode() != chat.EUnavailable {
		t.Fatalf("%s while writes fail: got %s, want 503 unavailable", what, r)
	}
	if r.Header.Get("Retry-After") == "" {
		t.Errorf("%s: 503 without Retry-After", what)
	}
}

func bigBody(n int) string { return strings.Repeat("x", n) }

// A database that is full: sends are refused with 503 + Retry-After (HTTP)
// and an unavailable error frame (WebSocket), /healthz says why, one line
// is logged for the whole episode, and once space returns everything works
// again without a restart, with seqs that did not skip.
func TestHostileDiskFull(t *testing.T) {
	ts := newServer(t)
	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	conv := alice.direct(t, bob).ID
	before := alice.sendN(t, conv, 3)
	ws := alice.dial(t, "alice-ws")
	if r := ts.health(t); r.Status != http.StatusOK {
		t.Fatalf("healthz before: %s", r)
	}

	// The database may not grow by a single page: max_page_count cannot go
	// below the current size, so 1 means "as large as it is now".
	ts.writerPragma(t, "max_page_count = 1")
	body := bigBody(12 << 10)
	for i := range 3 {
		r := alice.ts.do(t, "POST", convPath(conv, "messages"), alice.Token, map[string]string{"client_msg_id": fmt.Sprintf("full-%d", i), "body": body})
		wantUnavailable(t, "HTTP send", r)
	}
	if f := ws.sendWS(t, conv, "full-ws", body); f.Type != "error" || f.Code != chat.EUnavailable {
		t.Fatalf("WebSocket send while full: got %s, want an unavailable error frame", f)
	}
	h := ts.health(t)
	if h.Status != http.StatusServiceUnavailable || h.JSON["status"] == "ok" {
		t.Fatalf("healthz while full: got %s, want 503", h)
	}
	if reason := fmt.Sprint(h.JSON["checks"].(map[string]any)["sqlite"]); !strings.Contains(reason, "disk full") {
		t.Errorf("healthz reason: got %q, want it to say disk full", reason)
	}
	if got := metricValue(t, ts.metrics, "imserver_storage_write_errors_total"); got < 4 {
		t.Errorf("imserver_storage_write_errors_total{kind=full}: got %v, want >= 4", got)
	}
	// Reads keep working.
	if got := alice.all(t, conv); len(got) != len(before) {
		t.Fatalf("history while full: got %d messages, want %d", len(got), len(before))
	}

	ts.writerPragma(t, "max_page_count = 1073741823")
	// The retry of a refused send is stored once, with the next seq.
	after := alice.send(t, conv, "full-0", body)
	ws.sendWS(t, conv, "full-ws", body)
	if r := ts.health(t); r.Status != http.StatusOK {
		t.Fatalf("healthz after a write succeeded: %s", r)
	}
	if after.Seq != before[len(before)-1].Seq+1 {
		t.Fatalf("first seq after the disk came back: got %d, want %d", after.Seq, before[len(before)-1].Seq+1)
	}
	if got := seqsOf(alice.all(t, conv)); !equalSeqs(got, seqRange(1, 5)) {
		t.Fatalf("seqs after recovery: got %v, want 1..5", got)
	}
	logs := ts.logs.String()
	if n := strings.Count(logs, "writes are failing"); n != 1 {
		t.Errorf("log lines saying writes fail: got %d, want 1:\n%s", n, logs)
	}
	if n := strings.Count(logs, "writes succeed again"); n != 1 {
		t.Errorf("log lines saying writes recovered: got %d, want 1", n)
	}
	if strings.Contains(logs, "request failed") {
		t.Errorf("a refused write was logged as an internal error:\n%s", logs)
	}
}

// Every other write path while the database refuses writes (a read-only
// file system: SQLITE_READONLY): acks, read markers, registration, login's
// token, conversation and membership changes, session changes and tickets
// all answer 503; the acks are kept and written once writes work again.
func TestHostileReadOnlyWrites(t *testing.T) {
	ts := newServer(t)
	alice, bob, carol := ts.register(t, "alice"), ts.register(t, "bob"), ts.register(t, "carol")
	conv := alice.direct(t, bob).ID
	group := alice.group(t, "g", bob).ID
	bob.sendN(t, conv, 3)
	ws := alice.dial(t, "alice-ws")

	ts.writerPragma(t, "query_only = 1")
	wantUnavailable(t, "read marker", alice.post(t, convPath(conv, "read"), map[string]int64{"seq": 2}))
	// Acks are written behind; once the store knows that writes fail, the
	// client hears it too (and the ack is kept for later).
	wantUnavailable(t, "ack", alice.post(t, convPath(conv, "ack"), map[string]int64{"seq": 3}))
	wantUnavailable(t, "registration", ts.do(t, "POST", "/api/v1/auth/register", "", map[string]string{"username": "dave", "password": "password-dave"}))
	wantUnavailable(t, "login", ts.do(t, "POST", "/api/v1/auth/login", "", map[string]string{"username": "alice", "password": "password-alice"}))
	wantUnavailable(t, "direct", alice.post(t, "/api/v1/conversations/direct", map[string]string{"user_id": carol.ID()}))
	wantUnavailable(t, "group", alice.post(t, "/api/v1/groups", map[string]any{"name": "h", "member_ids": []string{carol.ID()}}))
	wantUnavailable(t, "add member", alice.post(t, convPath(group, "members"), map[string]any{"user_ids": []string{carol.ID()}}))
	wantUnavailable(t, "kick", alice.del(t, convPath(group, "members", bob.ID())))
	wantUnavailable(t, "ticket", alice.post(t, "/api/v1/auth/ticket", nil))
	wantUnavailable(t, "end other sessions", alice.del(t, "/api/v1/sessions?others=true"))
	for _, typ := range []string{"ack", "read"} {
		req := ws.newReq()
		ws.write(t, map[string]any{"type": typ, "req": req, "conv": conv, "seq": 3})
		if f := ws.next(t, typ+" error", withReq(req)); f.Type != "error" || f.Code != chat.EUnavailable {
			t.Fatalf("WebSocket %s while read-only: got %s, want an unavailable error frame", typ, f)
		}
	}
	if r := ts.health(t); r.Status != http.StatusServiceUnavailable || !strings.Contains(r.String(), "read-only") {
		t.Fatalf("healthz while read-only: got %s, want 503 saying read-only", r)
	}

	ts.writerPragma(t, "query_only = 0")
	// The acks held in memory are written by the next flush, which also
	// proves that writes work again.
	deadline := time.Now().Add(waitTimeout)
	for alice.conversation(t, conv).LastAckSeq != 3 || ts.health(t).Status != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatalf("after recovery: last_ack_seq %d, healthz %s", alice.conversation(t, conv).LastAckSeq, ts.health(t))
		}
		time.Sleep(20 * time.Millisecond)
	}
	alice.post(t, convPath(conv, "read"), map[string]int64{"seq": 2}).want(t, http.StatusNoContent)
	ts.register(t, "dave")
	ts.restart()
	if got := alice.conversation(t, conv); got.LastAckSeq != 3 || got.ReadSeq != 2 {
		t.Fatalf("after a restart: last_ack_seq %d read_seq %d, want 3 and 2", got.LastAckSeq, got.ReadSeq)
	}
}
