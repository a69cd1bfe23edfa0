package server_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/imserver/imserver/chat"
)

type inviteJSON struct {
	ID        string `json:"id"`
	Code      string `json:"code"`
	URL       string `json:"url"`
	ExpiresAt int64  `json:"expires_at"`
	MaxUses   int    `json:"max_uses"`
	Uses      int    `json:"uses"`
	UsesLeft  *int   `json:"uses_left"`
}

func inviteMode(admins ...string) func(*testConfig) {
	return func(c *testConfig) {
		c.chat.Registration = chat.RegisterInvite
		c.chat.Admins = admins
	}
}

// createInvite makes an invite as a.
func (a *account) createInvite(t testing.TB, body any) inviteJSON {
	t.Helper()
	var reply struct {
		Invite inviteJSON `json:"invite"`
	}
	a.post(t, "/api/v1/invites", body).want(t, http.StatusCreated).decode(t, &reply)
	return reply.Invite
}

func (ts *testServer) registerWith(t testing.TB, name, invite string) response {
	t.Helper()
	return ts.do(t, "POST", "/api/v1/auth/register", "", map[string]string{"username": name, "password": "password-" + name, "invite": invite})
}

func TestInviteRegistration(t *testing.T) {
	ts := newServer(t, inviteMode("root"))
	root := ts.addUser(t, "root")
	ts.registerWith(t, "stranger", "").wantError(t, http.StatusForbidden, "forbidden")

	inv := root.createInvite(t, map[string]any{"max_uses": 2})
	if len(inv.Code) < 22 || inv.ID == "" || !strings.HasSuffix(inv.URL, "/join/"+inv.Code) || !strings.HasPrefix(inv.URL, ts.URL) {
		t.Fatalf("invite: %+v", inv)
	}
	if inv.UsesLeft == nil || *inv.UsesLeft != 2 || inv.ExpiresAt <= time.Now().UnixMilli() {
		t.Fatalf("invite: %+v", inv)
	}
	ts.registerWith(t, "ann", inv.Code).want(t, http.StatusCreated)
	// A taken name does not use the invite up.
	ts.registerWith(t, "ann", inv.Code).wantError(t, http.StatusConflict, "conflict")
	ts.registerWith(t, "ben", inv.Code).want(t, http.StatusCreated)
	ts.registerWith(t, "cid", inv.Code).wantError(t, http.StatusForbidden, "forbidden")
	ts.registerWith(t, "cid", inv.Code+"x").wantError(t, http.StatusForbidden, "forbidden")

	// In invite mode every user may invite; lists show ids, never codes.
	ann := ts.login(t, "ann")
	mine := ann.createInvite(t, map[string]any{})
	if mine.UsesLeft != nil {
		t.Errorf("no max_uses: uses_left %v, want null", *mine.UsesLeft)
	}
	var list struct {
		Invites []inviteJSON `json:"invites"`
	}
	root.get(t, "/api/v1/invites").want(t, http.StatusOK).decode(t, &list)
	if len(list.Invites) != 1 || list.Invites[0].ID != inv.ID || list.Invites[0].Code != "" || list.Invites[0].Uses != 2 || *list.Invites[0].UsesLeft != 0 {
		t.Errorf("root's invites: %+v", list.Invites)
	}
	root.get(t, "/api/v1/admin/invites").want(t, http.StatusOK).decode(t, &list)
	if len(list.Invites) != 2 {
		t.Errorf("admin list: %+v", list.Invites)
	}
	ann.get(t, "/api/v1/admin/invites").wantError(t, http.StatusForbidden, "forbidden")

	// Revoke by code (the maker) or by id; others' invites are not found.
	ts.login(t, "ben").del(t, "/api/v1/invites/"+mine.ID).wantError(t, http.StatusNotFound, "not_found")
	ann.del(t, "/api/v1/invites/"+mine.Code).want(t, http.StatusNoContent)
	ts.registerWith(t, "dan", mine.Code).wantError(t, http.StatusForbidden, "forbidden")
	ann.del(t, "/api/v1/invites/"+mine.ID).wantError(t, http.StatusNotFound, "not_found")

	// Expired.
	short := root.createInvite(t, map[string]any{"expires_in_ms": 1})
	time.Sleep(5 * time.Millisecond)
	ts.registerWith(t, "eve", short.Code).wantError(t, http.StatusForbidden, "forbidden")

	for _, bad := range []any{map[string]any{"max_uses": -1}, map[string]any{"expires_in_ms": -5}, map[string]any{"max_uses": "x"}, "[]",
		// Past a year, also where the value in nanoseconds wraps around.
		map[string]any{"expires_in_ms": 31536000001}, map[string]any{"expires_in_ms": 10000000000000}, map[string]any{"expires_in_ms": int64(9223372036854775807)}} {
		root.post(t, "/api/v1/invites", bad).wantError(t, http.StatusBadRequest, "bad_request")
	}
}

// addUser creates an account through the service (as `imserver user add`
// does) and logs it in.
func (ts *testServer) addUser(t testing.TB, name string) *account {
	t.Helper()
	if _, err := ts.svc.AddUser(t.Context(), name, "password-"+name, ""); err != nil {
		t.Fatal(err)
	}
	return ts.login(t, name)
}

func (ts *testServer) login(t testing.TB, name string) *account {
	t.Helper()
	var reply struct {
		User  userJSON `json:"user"`
		Token string   `json:"token"`
	}
	ts.do(t, "POST", "/api/v1/auth/login", "", map[string]string{"username": name, "password": "password-" + name}).
		want(t, http.StatusOK).decode(t, &reply)
	return &account{ts: ts, User: reply.User, Token: reply.Token}
}

// Two people racing for the last use: exactly one wins, however many try.
func TestInviteLastUseRace(t *testing.T) {
	ts := newServer(t, inviteMode("root"))
	root := ts.addUser(t, "root")
	for round := range 3 {
		inv := root.createInvite(t, map[string]any{"max_uses": 1})
		const n = 8
		var wg sync.WaitGroup
		statuses := make([]int, n)
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				name := fmt.Sprintf("racer%d-%d", round, i)
				r, err := ts.doErr("POST", "/api/v1/auth/register", "", map[string]string{"username": name, "password": "password-" + name, "invite": inv.Code}, nil)
				if err != nil {
					t.Error(err)
					return
				}
				statuses[i] = r.Status
			}()
		}
		close(start)
		wg.Wait()
		won := 0
		for _, s := range statuses {
			switch s {
			case http.StatusCreated:
				won++
			case http.StatusForbidden:
			default:
				t.Errorf("status %d", s)
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d registrations won the last use, want 1 (%v)", round, won, statuses)
		}
	}
}

func TestInviteRules(t *testing.T) {
	t.Run("open mode: only admins invite, a given invite must be good", func(t *testing.T) {
		ts := newServer(t, func(c *testConfig) { c.chat.Admins = []string{"root"} })
		root := ts.addUser(t, "root")
		ann := ts.register(t, "ann")
		ann.post(t, "/api/v1/invites", map[string]any{}).wantError(t, http.StatusForbidden, "forbidden")
		inv := root.createInvite(t, map[string]any{"max_uses": 1})
		ts.registerWith(t, "ben", "nonsense").wantError(t, http.StatusForbidden, "forbidden")
		ts.registerWith(t, "ben", inv.Code).want(t, http.StatusCreated)
	})
	t.Run("closed mode: only an admin's invite opens registration", func(t *testing.T) {
		ts := newServer(t, func(c *testConfig) {
			c.chat.Registration = chat.RegisterClosed
			c.chat.Admins = []string{"root"}
		})
		root := ts.addUser(t, "root")
		ann := ts.addUser(t, "ann")
		ann.post(t, "/api/v1/invites", map[string]any{}).wantError(t, http.StatusForbidden, "forbidden")
		ts.registerWith(t, "ben", "").wantError(t, http.StatusForbidden, "forbidden")
		ts.registerWith(t, "ben", "nonsense").wantError(t, http.StatusForbidden, "forbidden")
		inv := root.createInvite(t, map[string]any{"max_uses": 1})
		ts.registerWith(t, "ben", inv.Code).want(t, http.StatusCreated)
		ts.registerWith(t, "cy", inv.Code).wantError(t, http.StatusForbidden, "forbidden")
	})
	t.Run("open invites per user are bounded", func(t *testing.T) {
		ts := newServer(t, inviteMode("root"))
		root := ts.addUser(t, "root")
		for range 100 {
			root.createInvite(t, map[string]any{})
		}
		root.post(t, "/api/v1/invites", map[string]any{}).wantError(t, http.StatusConflict, "conflict")
	})
	t.Run("guessing codes is rate limited", func(t *testing.T) {
		ts := newServer(t, inviteMode("root"), func(c *testConfig) { c.server.LoginFailures = 3 })
		root := ts.addUser(t, "root")
		inv := root.createInvite(t, map[string]any{})
		for i := range 3 {
			ts.registerWith(t, fmt.Sprintf("g%d", i), fmt.Sprintf("guess%d", i)).wantError(t, http.StatusForbidden, "forbidden")
		}
		ts.registerWith(t, "g9", inv.Code).wantError(t, http.StatusTooManyRequests, "rate_limited")
	})
}
