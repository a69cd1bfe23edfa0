package server_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/imserver/imserver/chat"
)

type muteEntry struct {
	ID         string `json:"id"`
	MutedUntil *int64 `json:"muted_until"`
	Version    int64  `json:"version"`
}

func (a *account) mutedUntil(t testing.TB, conv string) int64 {
	t.Helper()
	var reply struct {
		Conversation muteEntry `json:"conversation"`
	}
	a.get(t, convPath(conv)).want(t, http.StatusOK).decode(t, &reply)
	if reply.Conversation.MutedUntil == nil {
		t.Fatalf("entry without muted_until")
	}
	return *reply.Conversation.MutedUntil
}

func TestMute(t *testing.T) {
	ts := newServer(t)
	alice, bob, eve := ts.register(t, "alice"), ts.register(t, "bob"), ts.register(t, "eve")
	conv := alice.direct(t, bob).ID
	if got := alice.mutedUntil(t, conv); got != 0 {
		t.Fatalf("new entry: muted_until %d, want 0", got)
	}
	other := alice.dial(t, "alice-2")
	v := alice.sequences(t)
	alice.post(t, convPath(conv, "mute"), nil).want(t, http.StatusNoContent)
	if got := alice.mutedUntil(t, conv); got != chat.MuteForever {
		t.Errorf("muted until unmuted: muted_until %d, want %d", got, chat.MuteForever)
	}
	if alice.sequences(t) <= v {
		t.Error("a mute did not give the entry a new version")
	}
	f := other.next(t, "conversation frame", ofType("conversation"))
	if f.Conv != conv && (f.Conversation == nil || f.Conversation.ID != conv) {
		t.Errorf("conversation frame: %s", f)
	}
	if got := bob.mutedUntil(t, conv); got != 0 {
		t.Errorf("bob's entry: muted_until %d, want 0 (mutes are per user)", got)
	}
	until := time.Now().Add(time.Hour).UnixMilli()
	alice.post(t, convPath(conv, "mute"), map[string]any{"until_ms": until}).want(t, http.StatusNoContent)
	if got := alice.mutedUntil(t, conv); got != until {
		t.Errorf("muted for an hour: muted_until %d, want %d", got, until)
	}
	alice.post(t, convPath(conv, "unmute"), nil).want(t, http.StatusNoContent)
	if got := alice.mutedUntil(t, conv); got != 0 {
		t.Errorf("unmuted: muted_until %d", got)
	}
	// A mute that ended shows as none.
	alice.post(t, convPath(conv, "mute"), map[string]any{"until_ms": time.Now().Add(30 * time.Millisecond).UnixMilli()}).want(t, http.StatusNoContent)
	time.Sleep(50 * time.Millisecond)
	if got := alice.mutedUntil(t, conv); got != 0 {
		t.Errorf("after the mute ended: muted_until %d", got)
	}

	alice.post(t, convPath(conv, "mute"), map[string]any{"until_ms": 5}).wantError(t, http.StatusBadRequest, "bad_request")
	alice.post(t, convPath(conv, "mute"), map[string]any{"until_ms": "soon"}).wantError(t, http.StatusBadRequest, "bad_request")
	eve.post(t, convPath(conv, "mute"), nil).wantError(t, http.StatusForbidden, "not_member")
	eve.post(t, convPath("nope", "mute"), nil).wantError(t, http.StatusNotFound, "not_found")
	// The list shows it too.
	alice.post(t, convPath(conv, "mute"), nil).want(t, http.StatusNoContent)
	var ch struct {
		Conversations []muteEntry `json:"conversations"`
	}
	alice.get(t, "/api/v1/conversations?since=0").want(t, http.StatusOK).decode(t, &ch)
	if len(ch.Conversations) != 1 || ch.Conversations[0].MutedUntil == nil || *ch.Conversations[0].MutedUntil != chat.MuteForever {
		t.Errorf("list: %+v", ch.Conversations)
	}
}

func TestAdminDisableUser(t *testing.T) {
	ts := newServer(t, func(c *testConfig) { c.chat.Admins = []string{"root"} })
	root := ts.addUser(t, "root")
	bob := ts.register(t, "bob")
	other := ts.login(t, "bob")
	ws1, ws2 := bob.dial(t, "bob-1"), other.dial(t, "bob-2")

	bob.get(t, "/api/v1/admin/users").wantError(t, http.StatusForbidden, "forbidden")
	bob.post(t, "/api/v1/admin/users/"+root.ID()+"/disable", nil).wantError(t, http.StatusForbidden, "forbidden")

	var users struct {
		Users []struct {
			ID       string `json:"id"`
			Username string `json:"username"`
			Disabled bool   `json:"disabled"`
			Admin    bool   `json:"admin"`
		} `json:"users"`
	}
	root.get(t, "/api/v1/admin/users").want(t, http.StatusOK).decode(t, &users)
	if len(users.Users) != 2 || users.Users[0].Username != "bob" || users.Users[1].Username != "root" || !users.Users[1].Admin || users.Users[0].Admin {
		t.Fatalf("users: %+v", users.Users)
	}

	root.post(t, "/api/v1/admin/users/"+bob.ID()+"/disable", nil).want(t, http.StatusNoContent)
	// Its sockets close at once, as with logout; its tokens stop working.
	for _, c := range []*wsClient{ws1, ws2} {
		if got := c.closeStatus(t); got != websocket.StatusPolicyViolation {
			t.Errorf("%s: close status %v, want policy violation", c.name, got)
		}
	}
	bob.get(t, "/api/v1/me").wantError(t, http.StatusUnauthorized, "unauthorized")
	// The right password is told the account is disabled; a wrong one is
	// told nothing more than for anyone.
	// Both are 401 (PROTOCOL.md: login "→ 200 {user, token}; 401 otherwise").
	ts.do(t, "POST", "/api/v1/auth/login", "", map[string]string{"username": "bob", "password": "password-bob"}).wantError(t, http.StatusUnauthorized, "unauthorized")
	ts.do(t, "POST", "/api/v1/auth/login", "", map[string]string{"username": "bob", "password": "wrong-password"}).wantError(t, http.StatusUnauthorized, "unauthorized")
	root.get(t, "/api/v1/admin/users").want(t, http.StatusOK).decode(t, &users)
	if !users.Users[0].Disabled {
		t.Errorf("bob not shown disabled: %+v", users.Users)
	}
	root.post(t, "/api/v1/admin/users/"+root.ID()+"/disable", nil).wantError(t, http.StatusBadRequest, "bad_request")
	root.post(t, "/api/v1/admin/users/nobody/disable", nil).wantError(t, http.StatusNotFound, "not_found")

	root.post(t, "/api/v1/admin/users/"+bob.ID()+"/enable", nil).want(t, http.StatusNoContent)
	bob = ts.login(t, "bob")
	ws := bob.dial(t, "bob-3")

	// A password reset ends the sessions too.
	root.post(t, "/api/v1/admin/users/"+bob.ID()+"/password", map[string]string{"password": "short"}).wantError(t, http.StatusBadRequest, "bad_request")
	root.post(t, "/api/v1/admin/users/"+bob.ID()+"/password", map[string]string{"password": "a-new-password"}).want(t, http.StatusNoContent)
	if got := ws.closeStatus(t); got != websocket.StatusPolicyViolation {
		t.Errorf("after reset: close status %v", got)
	}
	bob.get(t, "/api/v1/me").wantError(t, http.StatusUnauthorized, "unauthorized")
	ts.do(t, "POST", "/api/v1/auth/login", "", map[string]string{"username": "bob", "password": "a-new-password"}).want(t, http.StatusOK)

	var status struct {
		Version  string            `json:"version"`
		Sessions int               `json:"sessions"`
		Checks   map[string]string `json:"checks"`
	}
	root.get(t, "/api/v1/admin/status").want(t, http.StatusOK).decode(t, &status)
	store := "sqlite"
	if testPG != nil {
		store = "postgres"
	}
	if status.Checks[store] != "ok" {
		t.Errorf("status: %+v", status)
	}
	bob.get(t, "/api/v1/admin/status").wantError(t, http.StatusUnauthorized, "unauthorized")
}

// TestMetricsNeedAToken: /metrics answers the metrics token and admins;
// no token or a bad one is 401, a user who is no admin 403.
func TestMetricsNeedAToken(t *testing.T) {
	ts := newServer(t, func(c *testConfig) { c.chat.Admins = []string{"root"} })
	root := ts.addUser(t, "root")
	bob := ts.register(t, "bob")
	ts.fetch(t, "/metrics", "").wantError(t, http.StatusUnauthorized, "unauthorized")
	ts.fetch(t, "/metrics", "not-the-token").wantError(t, http.StatusUnauthorized, "unauthorized")
	ts.fetch(t, "/metrics", bob.Token).wantError(t, http.StatusForbidden, "forbidden")
	for name, tok := range map[string]string{"the metrics token": testMetricsToken, "an admin": root.Token} {
		if m := ts.fetch(t, "/metrics", tok).want(t, http.StatusOK); !strings.Contains(string(m.Body), "imserver_sessions") {
			t.Errorf("%s: /metrics without imserver_sessions:\n%.300s", name, m.Body)
		}
	}
}

// TestMetricsTokenGuessesLimited: wrong metrics tokens count as failed
// guesses of the address, until it is refused 429; a user's own token is
// no guess, and the right metrics token still reads.
func TestMetricsTokenGuessesLimited(t *testing.T) {
	ts := newServer(t, func(c *testConfig) { c.server.LoginFailures = 3 })
	bob := ts.register(t, "bob")
	for range 5 {
		ts.fetch(t, "/metrics", bob.Token).wantError(t, http.StatusForbidden, "forbidden")
	}
	for range 3 {
		ts.fetch(t, "/metrics", "guess").wantError(t, http.StatusUnauthorized, "unauthorized")
	}
	ts.fetch(t, "/metrics", "guess").wantError(t, http.StatusTooManyRequests, "rate_limited")
	ts.fetch(t, "/metrics", testMetricsToken).want(t, http.StatusOK)
}
