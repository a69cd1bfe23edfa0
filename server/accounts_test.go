package server_test

import (
	"context"
	"net/http"
	"sort"
	"sync"
	"testing"
)

func TestRegister(t *testing.T) {
	ts := newServer(t)
	r := ts.do(t, "POST", "/api/v1/auth/register", "", map[string]string{"username": "alice", "password": "correct horse"}).want(t, http.StatusCreated)
	var reply struct {
		User  userJSON `json:"user"`
		Token string   `json:"token"`
	}
	r.decode(t, &reply)
	if reply.User.ID == "" || reply.Token == "" {
		t.Fatalf("got %s, want a user id and a token", r)
	}
	if got, want := reply.User.Username, "alice"; got != want {
		t.Errorf("username: got %q, want %q", got, want)
	}
	if got, want := reply.User.DisplayName, "alice"; got != want {
		t.Errorf("display_name defaults to the username: got %q, want %q", got, want)
	}

	r = ts.do(t, "POST", "/api/v1/auth/register", "", map[string]string{"username": "bob", "password": "correct horse", "display_name": "Bob B."}).want(t, http.StatusCreated)
	r.decode(t, &reply)
	if got, want := reply.User.DisplayName, "Bob B."; got != want {
		t.Errorf("display_name: got %q, want %q", got, want)
	}

	t.Run("duplicate username", func(t *testing.T) {
		ts.do(t, "POST", "/api/v1/auth/register", "", map[string]string{"username": "alice", "password": "another one"}).
			wantError(t, http.StatusConflict, "conflict")
	})
	t.Run("bad fields", func(t *testing.T) {
		for _, body := range []any{
			map[string]string{"username": "carol"},
			map[string]string{"password": "correct horse"},
			map[string]string{"username": "carol", "password": "short"},
			map[string]string{"username": "no spaces allowed", "password": "correct horse"},
			map[string]any{"username": 5, "password": "correct horse"},
		} {
			ts.do(t, "POST", "/api/v1/auth/register", "", body).wantError(t, http.StatusBadRequest, "bad_request")
		}
	})
}

func TestRegisterConcurrent(t *testing.T) {
	ts := newServer(t)
	const n = 6
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := ts.doErr("POST", "/api/v1/auth/register", "", map[string]string{"username": "same", "password": "correct horse"}, nil)
			if err != nil {
				t.Error(err)
				return
			}
			statuses[i] = r.Status
			if r.Status != http.StatusCreated && r.errorCode() != "conflict" {
				t.Errorf("got %s, want 201 or 409 conflict", r)
			}
		}()
	}
	wg.Wait()
	created := 0
	for _, s := range statuses {
		if s == http.StatusCreated {
			created++
		}
	}
	if created != 1 {
		t.Errorf("statuses %v: want exactly one 201", statuses)
	}
}

func TestRegistrationClosed(t *testing.T) {
	ts := newServer(t, func(c *testConfig) { c.chat.RegistrationOpen = false })
	ts.do(t, "POST", "/api/v1/auth/register", "", map[string]string{"username": "alice", "password": "correct horse"}).
		wantError(t, http.StatusForbidden, "forbidden")

	// Accounts made by the administrator (imserver user add) still log in.
	if _, err := ts.svc.AddUser(context.Background(), "alice", "correct horse", ""); err != nil {
		t.Fatal(err)
	}
	ts.do(t, "POST", "/api/v1/auth/login", "", map[string]string{"username": "alice", "password": "correct horse"}).want(t, http.StatusOK)
}

func TestLogin(t *testing.T) {
	ts := newServer(t)
	alice := ts.register(t, "alice")

	r := ts.do(t, "POST", "/api/v1/auth/login", "", map[string]string{"username": "alice", "password": "password-alice"}).want(t, http.StatusOK)
	var reply struct {
		User  userJSON `json:"user"`
		Token string   `json:"token"`
	}
	r.decode(t, &reply)
	if got, want := reply.User, alice.User; got != want {
		t.Errorf("user: got %+v, want %+v", got, want)
	}
	if reply.Token == "" || reply.Token == alice.Token {
		t.Errorf("login should issue a new token, got %q", reply.Token)
	}

	ts.do(t, "POST", "/api/v1/auth/login", "", map[string]string{"username": "alice", "password": "wrong password"}).
		wantError(t, http.StatusUnauthorized, "unauthorized")
	ts.do(t, "POST", "/api/v1/auth/login", "", map[string]string{"username": "nobody", "password": "password-alice"}).
		wantError(t, http.StatusUnauthorized, "unauthorized")
}

func TestLogout(t *testing.T) {
	ts := newServer(t)
	alice := ts.register(t, "alice")
	// A second token of the same user: another device.
	r := ts.do(t, "POST", "/api/v1/auth/login", "", map[string]string{"username": "alice", "password": "password-alice"}).want(t, http.StatusOK)
	var login struct {
		Token string `json:"token"`
	}
	r.decode(t, &login)
	other := &account{ts: ts, User: alice.User, Token: login.Token}

	tab1 := alice.dial(t, "tab1")
	tab2 := alice.dial(t, "tab2")
	phone := other.dial(t, "phone")

	ts.do(t, "POST", "/api/v1/auth/logout", alice.Token, nil).want(t, http.StatusNoContent)

	// The token is dead at once.
	alice.get(t, "/api/v1/me").wantError(t, http.StatusUnauthorized, "unauthorized")
	ts.do(t, "POST", "/api/v1/auth/logout", alice.Token, nil).wantError(t, http.StatusUnauthorized, "unauthorized")
	_, res, err := ts.dialRaw(alice.Token, nil)
	if err == nil {
		t.Fatal("WebSocket with a revoked token: dial succeeded")
	}
	if res == nil || res.StatusCode != http.StatusUnauthorized {
		t.Errorf("WebSocket with a revoked token: got %v, want status 401", res)
	}

	// Its live sockets are closed.
	for _, c := range []*wsClient{tab1, tab2} {
		if got := c.closeStatus(t); got == -1 {
			t.Logf("%s ended without a close frame", c.name)
		}
	}

	// The other token still works, over HTTP and on its socket.
	var me struct {
		User userJSON `json:"user"`
	}
	other.get(t, "/api/v1/me").want(t, http.StatusOK).decode(t, &me)
	if got, want := me.User, alice.User; got != want {
		t.Errorf("me: got %+v, want %+v", got, want)
	}
	phone.ping(t)
	bob := ts.register(t, "bob")
	conv := bob.direct(t, alice)
	m := bob.send(t, conv.ID, "hi", "still there?")
	if got := phone.waitLive(t, conv.ID, 1); got[0] != m {
		t.Errorf("phone got %+v, want %+v", got[0], m)
	}
}

func TestTokensSurviveRestart(t *testing.T) {
	ts := newServer(t)
	alice := ts.register(t, "alice")
	ts.restart()
	alice.get(t, "/api/v1/me").want(t, http.StatusOK)
	alice.dial(t, "after restart").ping(t)
}

func TestMe(t *testing.T) {
	ts := newServer(t)
	alice := ts.register(t, "alice")
	var me struct {
		User userJSON `json:"user"`
	}
	alice.get(t, "/api/v1/me").want(t, http.StatusOK).decode(t, &me)
	if got, want := me.User, alice.User; got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestUserSearch(t *testing.T) {
	ts := newServer(t)
	alice := ts.register(t, "alice")
	alan := ts.register(t, "alan")
	bob := ts.register(t, "bob")

	names := func(q string) []string {
		t.Helper()
		var r struct {
			Users []userJSON `json:"users"`
		}
		alice.get(t, "/api/v1/users?q="+q).want(t, http.StatusOK).decode(t, &r)
		out := []string{}
		for _, u := range r.Users {
			out = append(out, u.Username)
			if u.ID == "" {
				t.Errorf("user without id: %+v", u)
			}
		}
		sort.Strings(out)
		return out
	}
	for _, tc := range []struct {
		q    string
		want []string
	}{
		{"al", []string{alan.User.Username, alice.User.Username}},
		{"ali", []string{alice.User.Username}},
		{"b", []string{bob.User.Username}},
		{"zed", []string{}},
		{"", []string{"alan", "alice", "bob"}},
	} {
		got := names(tc.q)
		if len(got) != len(tc.want) {
			t.Errorf("q=%q: got %v, want %v", tc.q, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("q=%q: got %v, want %v", tc.q, got, tc.want)
				break
			}
		}
	}
	// A user object is id, username and display_name: nothing secret.
	r := alice.get(t, "/api/v1/users?q=a").want(t, http.StatusOK)
	for _, u := range r.JSON["users"].([]any) {
		for k := range u.(map[string]any) {
			if k != "id" && k != "username" && k != "display_name" {
				t.Errorf("user object has %q: %s", k, r)
			}
		}
	}
	// A prefix is not a pattern.
	if got := names("%25"); len(got) != 0 {
		t.Errorf("q=%%: got %v, want none", got)
	}
}
