package server_test

// Hostile and failing conditions (PROTOCOL.md v1.2): a database that cannot
// be written, bodies that trickle, clients that never read, sockets opened
// and dropped by the thousand, sessions and tickets guessed, reused or
// expired.

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"github.com/coder/websocket"
	"io"
	_ "modernc.org/sqlite"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/imserver/imserver/chat"
	"github.com/jackc/pgx/v5"
)

// failWrites makes the store refuse every write the way a full disk
// ("full") or a read-only database ("readonly") does, until allowWrites.
// On SQLite it is the condition itself, set on the writer's connection. On
// PostgreSQL a statement trigger on every table of the test's schema raises
// the SQLSTATE PostgreSQL answers with then (53100 disk_full, 25006
// read_only_sql_transaction): a real full disk would stop the shared test
// cluster's WAL too.
func (ts *testServer) failWrites(t testing.TB, kind string) {
	t.Helper()
	if testPG == nil {
		ts.writerPragma(t, map[string]string{"full": "max_page_count = 1", "readonly": "query_only = 1"}[kind])
		return
	}
	code, msg := "53100", "could not extend file: No space left on device"
	if kind == "readonly" {
		code, msg = "25006", "cannot execute in a read-only transaction"
	}
	ts.pgExec(t, `CREATE FUNCTION imserver_test_fail() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION '`+msg+`' USING ERRCODE = '`+code+`'; END $$;
	DO $$ DECLARE r record; BEGIN
		FOR r IN SELECT tablename FROM pg_tables WHERE schemaname = current_schema() LOOP
			EXECUTE format('CREATE TRIGGER imserver_test_fail BEFORE INSERT OR UPDATE OR DELETE ON %I FOR EACH STATEMENT EXECUTE FUNCTION imserver_test_fail()', r.tablename);
		END LOOP; END $$`)
}

// allowWrites undoes failWrites.
func (ts *testServer) allowWrites(t testing.TB, kind string) {
	t.Helper()
	if testPG == nil {
		ts.writerPragma(t, map[string]string{"full": "max_page_count = 1073741823", "readonly": "query_only = 0"}[kind])
		return
	}
	ts.pgExec(t, `DROP FUNCTION imserver_test_fail() CASCADE`)
}

// writerPragma sets a pragma on the server's write connection.
func (ts *testServer) writerPragma(t testing.TB, pragma string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := ts.db.ExecOnWriterForTest(ctx, "PRAGMA "+pragma); err != nil {
		t.Fatalf("PRAGMA %s: %v", pragma, err)
	}
}

// withPG runs fn on a connection to the test server's PostgreSQL schema,
// as the superuser (closed after: tests poll with it).
func (ts *testServer) withPG(t testing.TB, fn func(context.Context, *pgx.Conn) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, ts.path)
	if err != nil {
		t.Fatalf("connect to the test schema: %v", err)
	}
	defer conn.Close(ctx)
	if err := fn(ctx, conn); err != nil {
		t.Fatal(err)
	}
}

// pgExec runs sql in the test server's PostgreSQL schema.
func (ts *testServer) pgExec(t testing.TB, sql string) {
	t.Helper()
	ts.withPG(t, func(ctx context.Context, conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return fmt.Errorf("%s: %w", sql, err)
		}
		return nil
	})
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
	ts.failWrites(t, "full")
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
	if reason := fmt.Sprint(h.JSON["checks"].(map[string]any)[ts.storeName]); !strings.Contains(reason, "disk full") {
		t.Errorf("healthz reason: got %q, want it to say disk full", reason)
	}
	if got := metricValue(t, ts.metrics, "imserver_storage_write_errors_total"); got < 4 {
		t.Errorf("imserver_storage_write_errors_total{kind=full}: got %v, want >= 4", got)
	}
	// Reads keep working.
	if got := alice.all(t, conv); len(got) != len(before) {
		t.Fatalf("history while full: got %d messages, want %d", len(got), len(before))
	}

	ts.allowWrites(t, "full")
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

	ts.failWrites(t, "readonly")
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

	ts.allowWrites(t, "readonly")
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

// sessionJSON is an entry of GET /api/v1/sessions.
type sessionJSON struct {
	ID         string `json:"id"`
	CreatedAt  int64  `json:"created_at"`
	LastUsedAt int64  `json:"last_used_at"`
	UserAgent  string `json:"user_agent"`
	Address    string `json:"address"`
	Current    bool   `json:"current"`
}

func (a *account) sessions(t testing.TB) []sessionJSON {
	t.Helper()
	var reply struct {
		Sessions []sessionJSON `json:"sessions"`
	}
	a.get(t, "/api/v1/sessions").want(t, http.StatusOK).decode(t, &reply)
	return reply.Sessions
}

// login opens another session of a with the given user agent.
func (a *account) login(t testing.TB, userAgent string) *account {
	t.Helper()
	r, err := a.ts.doErr("POST", "/api/v1/auth/login", "", map[string]string{"username": a.User.Username, "password": "password-" + a.User.Username},
		http.Header{"User-Agent": {userAgent}})
	if err != nil {
		t.Fatal(err)
	}
	r.want(t, http.StatusOK)
	b := &account{ts: a.ts, User: a.User}
	b.Token, _ = r.JSON["token"].(string)
	return b
}

// Sessions: listed with their client, the caller's marked current; ending
// one (or all others) stops its token at once and closes its sockets;
// another user's session id or an unknown one is 404, never 204.
func TestHostileSessions(t *testing.T) {
	ts := newServer(t)
	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	laptop, phone := alice.login(t, "Laptop/1.0"), alice.login(t, "Phone/2.0")
	list := alice.sessions(t)
	if len(list) != 3 {
		t.Fatalf("sessions: got %d, want 3: %+v", len(list), list)
	}
	var current, laptopID, phoneID string
	for _, s := range list {
		if s.ID == "" || s.CreatedAt == 0 || s.LastUsedAt == 0 || s.Address != "127.0.0.1" {
			t.Errorf("session without id, times or address: %+v", s)
		}
		if s.ID == alice.Token || s.ID == laptop.Token || s.ID == phone.Token {
			t.Errorf("a session id is a token: %+v", s)
		}
		switch {
		case s.Current:
			current = s.ID
		case s.UserAgent == "Laptop/1.0":
			laptopID = s.ID
		case s.UserAgent == "Phone/2.0":
			phoneID = s.ID
		}
	}
	if current == "" || laptopID == "" || phoneID == "" {
		t.Fatalf("sessions: want one current, a Laptop and a Phone: %+v", list)
	}
	// A session id is not a credential.
	ts.do(t, "GET", "/api/v1/me", laptopID, nil).wantError(t, http.StatusUnauthorized, chat.EUnauthorized)

	ws := laptop.dial(t, "laptop-ws")
	// Another user's session, an unknown one, a guessed one: 404, and the
	// session still works.
	bob.del(t, "/api/v1/sessions/"+laptopID).wantError(t, http.StatusNotFound, chat.ENotFound)
	alice.del(t, "/api/v1/sessions/"+chat.NewID()).wantError(t, http.StatusNotFound, chat.ENotFound)
	alice.del(t, "/api/v1/sessions/"+laptop.Token).wantError(t, http.StatusNotFound, chat.ENotFound)
	laptop.get(t, "/api/v1/me").want(t, http.StatusOK)
	// Most recently used first, by the times listed: the laptop's use
	// just now (kept in memory until the next flush) puts it before the
	// phone, which logged in after it (the caller's own listing, as new
	// as the laptop's use to the millisecond, may come either side of it).
	time.Sleep(5 * time.Millisecond)
	phone.get(t, "/api/v1/me").want(t, http.StatusOK)
	time.Sleep(5 * time.Millisecond)
	laptop.get(t, "/api/v1/me").want(t, http.StatusOK)
	if l := alice.sessions(t); len(l) != 3 || l[2].ID != phoneID ||
		l[0].LastUsedAt < l[1].LastUsedAt || l[1].LastUsedAt < l[2].LastUsedAt || l[1].LastUsedAt == l[2].LastUsedAt {
		t.Fatalf("sessions not most recently used first: %+v", l)
	}
	alice.del(t, "/api/v1/sessions").wantError(t, http.StatusBadRequest, chat.EBadRequest)

	alice.del(t, "/api/v1/sessions/"+laptopID).want(t, http.StatusNoContent)
	laptop.get(t, "/api/v1/me").wantError(t, http.StatusUnauthorized, chat.EUnauthorized)
	if st := ws.closeStatus(t); st != websocket.StatusPolicyViolation {
		t.Fatalf("socket of the ended session: close status %v, want policy violation", st)
	}
	// Ended twice: 404 the second time.
	alice.del(t, "/api/v1/sessions/"+laptopID).wantError(t, http.StatusNotFound, chat.ENotFound)

	phoneWS := phone.dial(t, "phone-ws")
	alice.del(t, "/api/v1/sessions?others=true").want(t, http.StatusNoContent)
	phone.get(t, "/api/v1/me").wantError(t, http.StatusUnauthorized, chat.EUnauthorized)
	if st := phoneWS.closeStatus(t); st != websocket.StatusPolicyViolation {
		t.Fatalf("socket of another session: close status %v, want policy violation", st)
	}
	if list := alice.sessions(t); len(list) != 1 || !list[0].Current || list[0].ID != current {
		t.Fatalf("after logging out everywhere else: %+v", list)
	}
	bob.get(t, "/api/v1/me").want(t, http.StatusOK)
}

// A password change needs the old password (wrong: 403, then 429 like
// failed logins), ends every other session and keeps the caller's.
func TestHostilePasswordChange(t *testing.T) {
	// 3 wrong passwords instead of 10 (each costs an argon2 hash).
	ts := newServer(t, func(c *testConfig) { c.chat.PasswordFailures = 3 })
	alice := ts.register(t, "alice")
	other := alice.login(t, "Other/1.0")
	ws := other.dial(t, "other-ws")
	wrong := map[string]string{"old_password": "not it at all", "new_password": "a brand new password"}
	// A request without the old password is malformed, not a wrong guess:
	// 400, and as many as the limit of wrong ones do not block the user.
	for range 3 {
		alice.post(t, "/api/v1/auth/password", map[string]string{"new_password": "a brand new password"}).
			wantError(t, http.StatusBadRequest, chat.EBadRequest)
		alice.post(t, "/api/v1/auth/password", map[string]string{}).wantError(t, http.StatusBadRequest, chat.EBadRequest)
	}
	alice.post(t, "/api/v1/auth/password", wrong).wantError(t, http.StatusForbidden, chat.EForbidden)
	alice.post(t, "/api/v1/auth/password", map[string]string{"old_password": "password-alice", "new_password": "short"}).
		wantError(t, http.StatusBadRequest, chat.EBadRequest)
	ok := map[string]string{"old_password": "password-alice", "new_password": "a brand new password"}
	alice.post(t, "/api/v1/auth/password", ok).want(t, http.StatusNoContent)
	other.get(t, "/api/v1/me").wantError(t, http.StatusUnauthorized, chat.EUnauthorized)
	if st := ws.closeStatus(t); st != websocket.StatusPolicyViolation {
		t.Fatalf("socket of another session after a password change: %v", st)
	}
	alice.get(t, "/api/v1/me").want(t, http.StatusOK)
	ts.do(t, "POST", "/api/v1/auth/login", "", map[string]string{"username": "alice", "password": "password-alice"}).
		wantError(t, http.StatusUnauthorized, chat.EUnauthorized)
	ts.do(t, "POST", "/api/v1/auth/login", "", map[string]string{"username": "alice", "password": "a brand new password"}).want(t, http.StatusOK)

	// Guessing: after the allowed wrong old passwords the user is limited,
	// even the right one waits.
	bob := ts.register(t, "bob")
	limited := false
	for i := 0; i < 5 && !limited; i++ {
		r := bob.post(t, "/api/v1/auth/password", wrong)
		switch r.Status {
		case http.StatusForbidden:
		case http.StatusTooManyRequests:
			r.wantError(t, http.StatusTooManyRequests, chat.ERateLimited)
			if r.Header.Get("Retry-After") == "" {
				t.Errorf("429 without Retry-After")
			}
			limited = true
		default:
			t.Fatalf("wrong old password: %s", r)
		}
	}
	if !limited {
		t.Fatal("5 wrong old passwords were never rate limited")
	}
	bob.post(t, "/api/v1/auth/password", map[string]string{"old_password": "password-bob", "new_password": "another new one"}).
		wantError(t, http.StatusTooManyRequests, chat.ERateLimited)
	bob.get(t, "/api/v1/me").want(t, http.StatusOK)
}

// Tokens expire when unused for token_idle (use kept in memory counts) or
// older than token_max_age.
func TestHostileTokenExpiry(t *testing.T) {
	idle := newServer(t, func(c *testConfig) {
		c.chat.TokenIdle = 3 * time.Second
		c.chat.SessionFlushInterval = 100 * time.Millisecond
	})
	alice, bob := idle.register(t, "alice"), idle.register(t, "bob")
	// alice's token is used more often than the idle time; bob's is not.
	for range 16 {
		time.Sleep(250 * time.Millisecond)
		alice.get(t, "/api/v1/me").want(t, http.StatusOK)
	}
	alice.get(t, "/api/v1/me").want(t, http.StatusOK)
	bob.get(t, "/api/v1/me").wantError(t, http.StatusUnauthorized, chat.EUnauthorized)
	if _, res, err := idle.dialRaw(bob.Token, nil); err == nil || res == nil || res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("socket with an idle token: %v", err)
	}
	// Expired sessions are swept from the database; used ones stay.
	deadline := time.Now().Add(waitTimeout)
	for len(idle.storedLastUse(t, bob.ID())) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("an expired session was never deleted")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := len(idle.storedLastUse(t, alice.ID())); n != 1 {
		t.Fatalf("alice's sessions in the database: %d, want 1", n)
	}

	aged := newServer(t, func(c *testConfig) { c.chat.TokenMaxAge = time.Second })
	carol := aged.register(t, "carol")
	carol.get(t, "/api/v1/me").want(t, http.StatusOK)
	time.Sleep(1100 * time.Millisecond)
	carol.get(t, "/api/v1/me").wantError(t, http.StatusUnauthorized, chat.EUnauthorized)
}

func (a *account) ticket(t testing.TB) string {
	t.Helper()
	r := a.post(t, "/api/v1/auth/ticket", nil).want(t, http.StatusCreated)
	tk, _ := r.JSON["ticket"].(string)
	exp, _ := r.JSON["expires_at"].(float64)
	if tk == "" || int64(exp) <= time.Now().UnixMilli() {
		t.Fatalf("ticket reply: %s", r)
	}
	return tk
}

// dialTicket opens a socket with a ticket and returns the status of the
// handshake.
func (ts *testServer) dialTicket(ticket string) (*websocket.Conn, int) {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	c, res, err := websocket.Dial(ctx, "ws://"+ts.Host+"/api/v1/ws?ticket="+ticket, nil)
	if err != nil {
		if res != nil {
			return nil, res.StatusCode
		}
		return nil, 0
	}
	return c, http.StatusSwitchingProtocols
}

// Tickets open one socket once, within their time, on any process sharing
// the database; used, expired, guessed ones get 401 before the upgrade.
func TestHostileTickets(t *testing.T) {
	ts := newServer(t, func(c *testConfig) { c.chat.TicketTTL = 300 * time.Millisecond })
	alice := ts.register(t, "alice")

	tk := alice.ticket(t)
	c, status := ts.dialTicket(tk)
	if status != http.StatusSwitchingProtocols {
		t.Fatalf("dial with a fresh ticket: %d", status)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	_, hello, err := c.Read(ctx)
	if err != nil || !strings.Contains(string(hello), `"hello"`) || !strings.Contains(string(hello), alice.ID()) {
		t.Fatalf("hello over a ticket: %s %v", hello, err)
	}
	if _, status := ts.dialTicket(tk); status != http.StatusUnauthorized {
		t.Fatalf("ticket used twice: %d, want 401", status)
	}
	for _, guess := range []string{chat.NewID(), "x", alice.Token, strings.Repeat("A", 43)} {
		if _, status := ts.dialTicket(guess); status != http.StatusUnauthorized {
			t.Fatalf("guessed ticket %q: %d, want 401", guess, status)
		}
	}
	expired := alice.ticket(t)
	time.Sleep(400 * time.Millisecond)
	if _, status := ts.dialTicket(expired); status != http.StatusUnauthorized {
		t.Fatalf("expired ticket: %d, want 401", status)
	}
	// A ticket dies with the session that asked for it, and that session's
	// end closes the socket the ticket opened.
	other := alice.login(t, "Other/1.0")
	orphan := other.ticket(t)
	other.post(t, "/api/v1/auth/logout", nil).want(t, http.StatusNoContent)
	if _, status := ts.dialTicket(orphan); status != http.StatusUnauthorized {
		t.Fatalf("ticket of a logged-out session: %d, want 401", status)
	}
	alice.post(t, "/api/v1/auth/logout", nil).want(t, http.StatusNoContent)
	if _, _, err := c.Read(ctx); websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
		t.Fatalf("socket opened with a ticket after its session logged out: %v", err)
	}
}

// A ticket whose socket was refused before the upgrade (one socket too
// many, a foreign Origin, no handshake at all) is not spent: the client's
// next try with it opens the socket.
func TestHostileTicketKeptWhenRefused(t *testing.T) {
	ts := newServer(t, func(c *testConfig) { c.server.MaxSessionsPerUser = 1 })
	alice := ts.register(t, "alice")
	first := alice.dial(t, "first")
	tk := alice.ticket(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	_, res, err := websocket.Dial(ctx, "ws://"+ts.Host+"/api/v1/ws?ticket="+tk, nil)
	if err == nil || res == nil || res.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a socket too many: %v (%v), want 429", err, res)
	}
	first.conn.Close(websocket.StatusNormalClosure, "")
	for deadline := time.Now().Add(waitTimeout); ; time.Sleep(20 * time.Millisecond) {
		c, status := ts.dialTicket(tk)
		if status == http.StatusSwitchingProtocols {
			c.CloseNow()
			break
		}
		if status != http.StatusTooManyRequests || time.Now().After(deadline) {
			t.Fatalf("the refused ticket once the socket closed: %d, want 101", status)
		}
	}
	if _, status := ts.dialTicket(tk); status != http.StatusUnauthorized {
		t.Fatalf("the ticket after it opened a socket: %d, want 401", status)
	}

	tk = ts.register(t, "bob").ticket(t)
	_, res, err = websocket.Dial(ctx, "ws://"+ts.Host+"/api/v1/ws?ticket="+tk,
		&websocket.DialOptions{HTTPHeader: http.Header{"Origin": {"https://elsewhere.example"}}})
	if err == nil || res == nil || res.StatusCode != http.StatusForbidden {
		t.Fatalf("a foreign Origin: %v (%v), want 403", err, res)
	}
	ts.do(t, "GET", "/api/v1/ws?ticket="+tk, "", nil).wantError(t, http.StatusBadRequest, chat.EBadRequest)
	c, status := ts.dialTicket(tk)
	if status != http.StatusSwitchingProtocols {
		t.Fatalf("the ticket after two refusals: %d, want 101", status)
	}
	c.CloseNow()
}

// Twenty upgrades race for one ticket: exactly one wins.
func TestHostileTicketRace(t *testing.T) {
	ts := newServer(t)
	alice := ts.register(t, "alice")
	tk := alice.ticket(t)
	var wg sync.WaitGroup
	var won, refused atomic.Int32
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			c, res, err := websocket.Dial(ctx, "ws://"+ts.Host+"/api/v1/ws?ticket="+tk, nil)
			switch {
			case err == nil:
				won.Add(1)
				c.CloseNow()
			case res != nil && res.StatusCode == http.StatusUnauthorized:
				// The protocol's JSON error, no trace of the handshake
				// that was held back.
				body, _ := io.ReadAll(res.Body)
				if res.Header.Get("Sec-WebSocket-Accept") != "" || res.Header.Get("Upgrade") != "" ||
					!strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") || !strings.Contains(string(body), `"unauthorized"`) {
					t.Errorf("a losing upgrade's answer: %v %s", res.Header, body)
				}
				refused.Add(1)
			}
		}()
	}
	wg.Wait()
	if won.Load() != 1 || refused.Load() != 19 {
		t.Fatalf("20 upgrades with one ticket: %d opened, %d refused; want 1 and 19", won.Load(), refused.Load())
	}
}

// One more socket than websocket.max_sessions_per_user: 429 before the
// upgrade, counted; a closed socket frees its place.
func TestHostileSocketsPerUser(t *testing.T) {
	ts := newServer(t, func(c *testConfig) { c.server.MaxSessionsPerUser = 2 })
	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	a1 := alice.dial(t, "a1")
	alice.dial(t, "a2")
	_, res, err := ts.dialRaw(alice.Token, nil)
	if err == nil || res == nil || res.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("third socket: %v (%v), want 429", err, res)
	}
	if res.Header.Get("Retry-After") == "" {
		t.Error("429 without Retry-After")
	}
	bob.dial(t, "b1") // others are not affected
	if got := metricValue(t, ts.metrics, "imserver_sessions_refused_total"); got != 1 {
		t.Errorf("imserver_sessions_refused_total: got %v, want 1", got)
	}
	a1.conn.Close(websocket.StatusNormalClosure, "")
	deadline := time.Now().Add(waitTimeout)
	for {
		c, _, err := ts.dialRaw(alice.Token, nil)
		if err == nil {
			c.CloseNow()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a closed socket's place was not freed: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A request body that trickles (headers promising 100 bytes, then one) is
// cut after http.read_timeout; a WebSocket idle for longer is not.
func TestHostileTrickledBody(t *testing.T) {
	ts := newServer(t, func(c *testConfig) { c.server.ReadTimeout = 300 * time.Millisecond })
	alice := ts.register(t, "alice")
	ws := alice.dial(t, "alice-ws")

	conn, err := net.Dial("tcp", ts.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /api/v1/auth/login HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{", ts.Host)
	conn.SetReadDeadline(time.Now().Add(waitTimeout))
	start := time.Now()
	rest, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("the trickling connection was not cut (waited %s): %v", time.Since(start), err)
	}
	if len(rest) > 0 && !strings.HasPrefix(string(rest), "HTTP/1.1 400") {
		t.Errorf("answer to a body that never came: %q", rest)
	}

	// The socket outlived several read timeouts and still answers.
	time.Sleep(time.Second)
	ws.ping(t)
	// So does a socket whose handshake came on a connection that carried
	// an API request first (its deadlines must not leak into the socket).
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	req, _ := http.NewRequest("GET", ts.URL+"/api/v1/me", nil)
	req.Header.Set("Authorization", "Bearer "+alice.Token)
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	c, _, err := websocket.Dial(ctx, ts.wsURL(alice.Token), &websocket.DialOptions{HTTPClient: client})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	if _, _, err := c.Read(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"type":"ping","req":"p"}`)); err != nil {
		t.Fatal(err)
	}
	if _, b, err := c.Read(ctx); err != nil || !strings.Contains(string(b), "pong") {
		t.Fatalf("socket after its connection's API request: %s %v", b, err)
	}
}

// leanReader reads a socket as fast as it can and keeps only what a test
// needs: the seqs it got and how many sends were answered. When the server
// cuts its live stream (resync), it catches up with sync, as clients do.
type leanReader struct {
	conn    *websocket.Conn
	mu      sync.Mutex
	seqs    map[int64]bool
	sent    int
	resyncs int
	err     error
	done    chan struct{}
}

func readLean(c *websocket.Conn) *leanReader {
	r := &leanReader{conn: c, seqs: make(map[int64]bool), done: make(chan struct{})}
	c.SetReadLimit(1 << 30)
	go func() {
		defer close(r.done)
		for {
			_, b, err := c.Read(context.Background())
			if err != nil {
				r.mu.Lock()
				r.err = err
				r.mu.Unlock()
				return
			}
			var f struct {
				Type     string        `json:"type"`
				Conv     string        `json:"conv"`
				Message  messageJSON   `json:"message"`
				Messages []messageJSON `json:"messages"`
			}
			if json.Unmarshal(b, &f) != nil {
				continue
			}
			r.mu.Lock()
			switch f.Type {
			case "sent":
				r.sent++
			case "msg":
				r.seqs[f.Message.Seq] = true
			case "batch", "messages":
				for _, m := range f.Messages {
					r.seqs[m.Seq] = true
				}
			case "resync":
				r.resyncs++
				go c.Write(context.Background(), websocket.MessageText, []byte(`{"type":"sync","req":"s","conv":"`+f.Conv+`","after_seq":0,"limit":1000}`))
			}
			r.mu.Unlock()
		}
	}()
	return r
}

func (r *leanReader) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seqs)
}

func (r *leanReader) sentCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sent
}

func heapInUse() uint64 {
	// Twice: the first collection moves what sync.Pools hold (the session
	// writers' pooled buffers) to their victim caches, the second frees
	// it. What a pool caches is not memory kept for a slow client.
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// A member that never reads its socket during a fan-out: its session is
// cut, the server's memory does not grow with what it missed, and the
// others get every message live.
func TestHostileNeverReadingClient(t *testing.T) {
	ts := newServer(t, func(c *testConfig) {
		c.server.SessionQueue = 256
		// Long enough that a reading client on a loaded machine is never
		// taken for one that does not read.
		c.server.WriteTimeout = 3 * time.Second
		c.chat.SendRate, c.chat.SendBurst = 100_000, 100_000
	})
	alice, bob, carol := ts.register(t, "alice"), ts.register(t, "bob"), ts.register(t, "carol")
	group := alice.group(t, "fan-out", bob, carol).ID
	bobConn, _, err := ts.dialRaw(bob.Token, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer bobConn.CloseNow()
	bobR := readLean(bobConn)
	// carol's socket is opened and never read.
	carolConn, _, err := ts.dialRaw(carol.Token, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer carolConn.CloseNow()
	// The sender keeps nothing of its replies either: the heap measured
	// is then the server's.
	senderConn, _, err := ts.dialRaw(alice.Token, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer senderConn.CloseNow()
	senderR := readLean(senderConn)

	const n, size = 1000, 8 << 10
	base := heapInUse()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	start := time.Now()
	frame := []byte(`{"type":"send","req":"r","conv":"` + group + `","client_msg_id":"%d","body":"` + bigBody(size) + `"}`)
	for i := range n {
		if err := senderConn.Write(ctx, websocket.MessageText, []byte(strings.Replace(string(frame), "%d", fmt.Sprint(i), 1))); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("frames written in %s", time.Since(start))
	deadline := time.Now().Add(waitTimeout)
	for bobR.count() < n || senderR.sentCount() < n {
		bobR.mu.Lock()
		bobErr := bobR.err
		bobR.mu.Unlock()
		if bobErr != nil {
			t.Fatalf("bob's socket, which reads, ended after %d of %d messages: %v", bobR.count(), n, bobErr)
		}
		if time.Now().After(deadline) {
			t.Fatalf("bob got %d of %d messages live while carol did not read", bobR.count(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	bobR.mu.Lock()
	t.Logf("bob got everything after %s (%d resyncs)", time.Since(start), bobR.resyncs)
	bobR.mu.Unlock()
	for metricValue(t, ts.metrics, "imserver_sessions") > 2 {
		if time.Now().After(deadline) {
			t.Fatal("the session that never reads was not cut")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// 16 MiB went to carol; her socket buffers hold a few, her queue at
	// most session_queue frames. Had the server kept what she missed, it
	// would hold all of it.
	grown := int64(heapInUse()) - int64(base)
	t.Logf("heap grew by %.1f MiB while %d MiB went to a client that never reads", float64(grown)/(1<<20), n*size>>20)
	if grown > n*size/2 {
		t.Fatalf("heap grew by %d MiB while sending %d MiB to a client that never reads", grown>>20, n*size>>20)
	}
}

// 1,000 sockets opened and dropped without reading leave no goroutine
// behind.
func TestHostileThousandDroppedSockets(t *testing.T) {
	ts := newServer(t, func(c *testConfig) { c.server.MaxSessionsPerUser = 2000 })
	alice := ts.register(t, "alice")
	alice.get(t, "/api/v1/me").want(t, http.StatusOK)
	ts.http.CloseIdleConnections()
	base := runtime.NumGoroutine()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	var failed atomic.Int32
	for range 1000 {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c, _, err := ts.dialRaw(alice.Token, nil)
			if err != nil {
				failed.Add(1)
				return
			}
			c.CloseNow()
		}()
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d of 1000 dials failed", failed.Load())
	}
	deadline := time.Now().Add(waitTimeout)
	for {
		n := runtime.NumGoroutine()
		if n <= base+5 && metricValue(t, ts.metrics, "imserver_sessions") == 0 {
			break
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines: %d before, %d after 1000 dropped sockets:\n%s", base, n, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(50 * time.Millisecond)
	}
	alice.dial(t, "after") // the server still serves
}

// storedLastUse reads a session's last use as the database has it.
func (ts *testServer) storedLastUse(t testing.TB, user string) []int64 {
	t.Helper()
	const q = `SELECT last_used_at FROM tokens WHERE user_id = $1 ORDER BY created_at`
	var out []int64
	if testPG != nil {
		ts.withPG(t, func(ctx context.Context, conn *pgx.Conn) error {
			rows, err := conn.Query(ctx, q, user)
			if err != nil {
				return err
			}
			out, err = pgx.CollectRows(rows, pgx.RowTo[int64])
			return err
		})
		return out
	}
	db, err := sql.Open("sqlite", "file:"+ts.path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(q, user)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

// A token's use is not a write per request: it is kept in memory (and
// shown from there) and written with the next flush (at the latest when
// the server stops).
func TestHostileSessionUseNotWrittenPerRequest(t *testing.T) {
	ts := newServer(t)
	alice := ts.register(t, "alice")
	created := ts.storedLastUse(t, alice.ID())
	time.Sleep(20 * time.Millisecond)
	for range 20 {
		alice.get(t, "/api/v1/me").want(t, http.StatusOK)
	}
	if got := ts.storedLastUse(t, alice.ID()); len(got) != 1 || got[0] != created[0] {
		t.Fatalf("stored last use after 20 requests: %v, want it unchanged at %v (written once a minute)", got, created)
	}
	shown := alice.sessions(t)[0].LastUsedAt
	if shown <= created[0] {
		t.Fatalf("listed last use %d is not after creation %d", shown, created[0])
	}
	ts.restart()
	if got := ts.storedLastUse(t, alice.ID()); len(got) != 1 || got[0] < shown {
		t.Fatalf("stored last use after the flush: %v, want >= %d", got, shown)
	}
}

// TestSocketKeepsSessionAndEndsWithIt: an open socket is a use of its
// session, so a quiet socket keeps its token from expiring for
// idleness; once the session is past token_max_age the socket is closed
// with 1008, as at logout, and the token is refused.
func TestSocketKeepsSessionAndEndsWithIt(t *testing.T) {
	const idle, maxAge = 800 * time.Millisecond, 3 * time.Second
	ts := newServer(t, func(c *testConfig) {
		c.chat.TokenIdle = idle
		c.chat.TokenMaxAge = maxAge
		c.chat.SessionFlushInterval = 100 * time.Millisecond
	})
	alice := ts.register(t, "alice")
	created := time.Now()
	ws := alice.dial(t, "alice")
	time.Sleep(2 * idle) // the socket quiet, the token not used otherwise
	alice.get(t, "/api/v1/me").want(t, http.StatusOK)

	if status := ws.closeStatus(t); status != websocket.StatusPolicyViolation {
		t.Errorf("the socket closed with %d at the session's max age, want 1008", status)
	}
	if lived := time.Since(created); lived < maxAge || lived > maxAge+2*time.Second {
		t.Errorf("the socket closed %s after the session began, want soon after %s", lived, maxAge)
	}
	alice.get(t, "/api/v1/me").wantError(t, http.StatusUnauthorized, chat.EUnauthorized)
}
