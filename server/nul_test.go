package server_test

import (
	"net/http"
	"net/url"
	"testing"
)

// TestNULCharacters: text with a NUL character (valid JSON, "\u0000") is
// answered the same on both stores, though PostgreSQL's text cannot hold
// it: what a client would store is refused with bad_request and nothing
// is stored; an id or a name looked up names nothing (401 for a login,
// 404 for a conversation, a user or a session, no users found), and no
// database error reaches the client.
func TestNULCharacters(t *testing.T) {
	ts := newServer(t)
	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	g := alice.group(t, "team", bob)
	m := alice.send(t, g.ID, "first", "hello")

	stored := []struct {
		path string
		body map[string]any
	}{
		{convPath(g.ID, "messages"), map[string]any{"client_msg_id": "n1", "body": "a\x00b"}},
		{convPath(g.ID, "messages"), map[string]any{"client_msg_id": "n\x002", "body": "ok"}},
		{convPath(g.ID, "messages"), map[string]any{"client_msg_id": "n3", "kind": "reaction", "target": m.Seq, "emoji": "x\x00", "on": true}},
		{convPath(g.ID, "messages"), map[string]any{"client_msg_id": "n4", "kind": "edit", "target": m.Seq, "body": "b\x00"}},
		{"/api/v1/groups", map[string]any{"name": "n\x00g", "member_ids": []string{}}},
	}
	for _, s := range stored {
		alice.post(t, s.path, s.body).wantError(t, http.StatusBadRequest, "bad_request")
	}
	ts.do(t, "POST", "/api/v1/auth/register", "", map[string]any{"username": "carol", "password": "password123", "display_name": "C\x00"}).
		wantError(t, http.StatusBadRequest, "bad_request")
	ws := alice.dial(t, "alice")
	if f := ws.call(t, map[string]any{"type": "send", "conv": g.ID, "client_msg_id": "n5", "body": "c\x00"}); f.Type != "error" || f.Code != "bad_request" {
		t.Errorf("WebSocket send with NUL: %s, want a bad_request error", f)
	}
	ws.ping(t) // the session stays open
	if got := alice.all(t, g.ID); len(got) != 1 || got[0].Body != "hello" {
		t.Errorf("after the refusals the group holds %+v, want only the first message", got)
	}

	ts.do(t, "POST", "/api/v1/auth/login", "", map[string]any{"username": "al\x00ice", "password": "password123"}).
		wantError(t, http.StatusUnauthorized, "unauthorized")
	alice.get(t, "/api/v1/conversations/a%00b").wantError(t, http.StatusNotFound, "not_found")
	alice.post(t, "/api/v1/conversations/direct", map[string]any{"user_id": "x\x00"}).wantError(t, http.StatusNotFound, "not_found")
	alice.del(t, "/api/v1/sessions/x%00").wantError(t, http.StatusNotFound, "not_found")
	var users struct {
		Users []any `json:"users"`
	}
	alice.get(t, "/api/v1/users?q="+url.QueryEscape("a\x00b")).want(t, http.StatusOK).decode(t, &users)
	if users.Users == nil || len(users.Users) != 0 {
		t.Errorf("users matching a NUL: %+v, want none", users.Users)
	}
	if f := ws.call(t, map[string]any{"type": "sync", "conv": "x\x00", "after_seq": 0}); f.Type != "error" || f.Code != "not_found" {
		t.Errorf("WebSocket sync of a conv with NUL: %s, want not_found", f)
	}
}
