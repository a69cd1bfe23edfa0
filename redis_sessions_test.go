package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// Sessions and tickets across two processes sharing the database and a
// Redis: a ticket from A opens a socket on B; ending that session through
// A closes the socket on B at once (the bus carries it, as for logouts);
// so does a password change.
func TestRedisSessionsAcrossProcesses(t *testing.T) {
	pair := startRedisPair(t, "sessions.db")
	a, b := pair.a, pair.b
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	alice := registerUser(t, a, "alice")
	login := func(p *lproc) string {
		var out struct {
			Token string `json:"token"`
		}
		if code := p.do(t, "POST", "/api/v1/auth/login", "", map[string]string{"username": "alice", "password": "password123"}, &out); code != 200 {
			t.Fatalf("login: %d", code)
		}
		return out.Token
	}
	laptop, phone := login(a), login(b)

	var tk struct {
		Ticket string `json:"ticket"`
	}
	if code := a.do(t, "POST", "/api/v1/auth/ticket", laptop, nil, &tk); code != 201 {
		t.Fatalf("ticket from A: %d", code)
	}
	wsB := "ws" + strings.TrimPrefix(b.base, "http") + "/api/v1/ws?ticket="
	laptopB, _, err := websocket.Dial(ctx, wsB+tk.Ticket, nil)
	if err != nil {
		t.Fatalf("ticket from A used on B: %v", err)
	}
	defer laptopB.CloseNow()
	if _, res, err := websocket.Dial(ctx, wsB+tk.Ticket, nil); err == nil || res == nil || res.StatusCode != 401 {
		t.Fatalf("the same ticket again on B: %v", err)
	}
	phoneA := dialWS(t, ctx, a, "phone@A", phone)

	var list struct {
		Sessions []struct {
			ID      string `json:"id"`
			Current bool   `json:"current"`
		} `json:"sessions"`
	}
	if code := b.do(t, "GET", "/api/v1/sessions", alice.Token, nil, &list); code != 200 || len(list.Sessions) != 3 {
		t.Fatalf("sessions from B: %d %+v", code, list)
	}
	// Which one is the laptop's: the one current when the laptop asks.
	var laptopID string
	a.do(t, "GET", "/api/v1/sessions", laptop, nil, &list)
	for _, s := range list.Sessions {
		if s.Current {
			laptopID = s.ID
		}
	}
	if code := a.do(t, "DELETE", "/api/v1/sessions/"+laptopID, alice.Token, nil, nil); code != 204 {
		t.Fatalf("ending the laptop's session through A: %d", code)
	}
	readCtx, readCancel := context.WithTimeout(ctx, 10*time.Second)
	defer readCancel()
	for {
		if _, _, err := laptopB.Read(readCtx); err != nil {
			if websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
				t.Fatalf("laptop's socket on B after its session ended through A: %v", err)
			}
			break
		}
	}
	if code := b.do(t, "GET", "/api/v1/me", laptop, nil, nil); code != 401 {
		t.Fatalf("ended session used on B: %d", code)
	}

	if code := b.do(t, "POST", "/api/v1/auth/password", alice.Token, map[string]string{"old_password": "password123", "new_password": "password456"}, nil); code != 204 {
		t.Fatalf("password change through B: %d", code)
	}
	if !phoneA.waitFor(10*time.Second, func() bool { return phoneA.closed }) {
		t.Fatal("phone's socket on A still open after a password change through B")
	}
	if code := a.do(t, "GET", "/api/v1/me", alice.Token, nil, nil); code != 200 {
		t.Fatalf("the session that changed the password, on A: %d", code)
	}
}
