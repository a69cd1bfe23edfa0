package server_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestMutationBadInput: every refusal of the v1.1 table gets its error,
// over HTTP and over the WebSocket (whose session stays open), and stores
// nothing.
func TestMutationBadInput(t *testing.T) {
	ts := newServer(t)
	alice, bob, carol := ts.register(t, "alice"), ts.register(t, "bob"), ts.register(t, "carol")
	g := alice.group(t, "team", bob)
	old := alice.send(t, g.ID, "a0", "before carol")
	alice.post(t, convPath(g.ID, "members"), map[string]any{"user_ids": []string{carol.ID()}}).want(t, http.StatusOK)
	mine := alice.send(t, g.ID, "a1", "alice's")
	gone := alice.send(t, g.ID, "a2", "to delete")
	alice.remove(t, g.ID, gone.Seq)
	reaction := bob.react(t, g.ID, mine.Seq, "👍", true)
	maxSeq := alice.conversation(t, g.ID).MaxSeq

	cases := []struct {
		name   string
		who    *account
		fields map[string]any
		status int
		code   string
	}{
		{"edit of another's message", bob, map[string]any{"kind": "edit", "target": mine.Seq, "body": "x"}, 403, "forbidden"},
		{"delete of another's message by a member", bob, map[string]any{"kind": "delete", "target": mine.Seq}, 403, "forbidden"},
		{"edit of a deleted message", alice, map[string]any{"kind": "edit", "target": gone.Seq, "body": "x"}, 409, "conflict"},
		{"delete of a deleted message", alice, map[string]any{"kind": "delete", "target": gone.Seq}, 409, "conflict"},
		{"reaction to a deleted message", bob, map[string]any{"kind": "reaction", "target": gone.Seq, "emoji": "👍", "on": true}, 409, "conflict"},
		{"reaction twice", bob, map[string]any{"kind": "reaction", "target": mine.Seq, "emoji": "👍", "on": true}, 409, "conflict"},
		{"reaction off that is not there", bob, map[string]any{"kind": "reaction", "target": mine.Seq, "emoji": "🎉", "on": false}, 409, "conflict"},
		{"target that does not exist", alice, map[string]any{"kind": "edit", "target": 999, "body": "x"}, 404, "not_found"},
		{"target before the sender joined", carol, map[string]any{"kind": "reaction", "target": old.Seq, "emoji": "👍", "on": true}, 404, "not_found"},
		{"target that is not text", bob, map[string]any{"kind": "delete", "target": reaction.Seq}, 404, "not_found"},
		{"reply to a seq that does not exist", bob, map[string]any{"body": "re", "reply_to": 999}, 404, "not_found"},
		{"reply to a seq before the sender joined", carol, map[string]any{"body": "re", "reply_to": old.Seq}, 404, "not_found"},
		{"empty emoji", bob, map[string]any{"kind": "reaction", "target": mine.Seq, "emoji": "", "on": true}, 400, "bad_request"},
		{"emoji of 65 bytes", bob, map[string]any{"kind": "reaction", "target": mine.Seq, "emoji": strings.Repeat("a", 65), "on": true}, 400, "bad_request"},
		{"reaction without on", bob, map[string]any{"kind": "reaction", "target": mine.Seq, "emoji": "👍"}, 400, "bad_request"},
		{"mutation without target", alice, map[string]any{"kind": "delete"}, 400, "bad_request"},
		{"edit without body", alice, map[string]any{"kind": "edit", "target": mine.Seq}, 400, "bad_request"},
		{"unknown kind", alice, map[string]any{"kind": "poll", "body": "x"}, 400, "bad_request"},
		{"negative target", alice, map[string]any{"kind": "delete", "target": -1}, 400, "bad_request"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.who.sendKind(t, g.ID, c.fields).wantError(t, c.status, c.code)
			ws := c.who.dial(t, c.who.User.Username)
			f := map[string]any{"type": "send", "conv": g.ID, "client_msg_id": ts.unique("w")}
			for k, v := range c.fields {
				f[k] = v
			}
			if r := ws.call(t, f); r.Type != "error" || r.Code != c.code {
				t.Fatalf("over WebSocket: %s, want error %s", r, c.code)
			}
			ws.ping(t) // the session is still open
			if got := alice.conversation(t, g.ID).MaxSeq; got != maxSeq {
				t.Fatalf("max_seq %d after a refusal, want %d: something was stored", got, maxSeq)
			}
		})
	}
	// A former member's mutation: not_member, as for text.
	bob.post(t, convPath(g.ID, "leave"), nil).want(t, http.StatusNoContent)
	bob.sendKind(t, g.ID, map[string]any{"kind": "reaction", "target": mine.Seq, "emoji": "👍", "on": false}).wantError(t, http.StatusForbidden, "not_member")
}

// TestMutationRaceInOneBatch: a delete and an edit of one message queued
// together are decided in the write transaction: whichever comes second
// sees the first.
func TestMutationRaceInOneBatch(t *testing.T) {
	ts := newServer(t)
	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	g := alice.group(t, "team", bob)
	ws := alice.dial(t, "alice")
	for i := range 20 {
		m := alice.send(t, g.ID, ts.unique("a"), "race")
		d := map[string]any{"type": "send", "req": ts.unique("d"), "conv": g.ID, "client_msg_id": ts.unique("d"), "kind": "delete", "target": m.Seq}
		e := map[string]any{"type": "send", "req": ts.unique("e"), "conv": g.ID, "client_msg_id": ts.unique("e"), "kind": "edit", "target": m.Seq, "body": "edited"}
		if i%2 == 1 {
			d, e = e, d
		}
		ws.write(t, d)
		ws.write(t, e)
		first := ws.next(t, "first", withReq(d["req"].(string)))
		second := ws.next(t, "second", withReq(e["req"].(string)))
		if first.Type != "sent" {
			t.Fatalf("first mutation: %s", first)
		}
		got := alice.message(t, g.ID, m.Seq)
		if d["kind"] == "delete" {
			// The edit after the delete is refused.
			if second.Type != "error" || second.Code != "conflict" || !got.Deleted || got.Body != "" {
				t.Fatalf("edit after delete: %s, folded %+v", second, got)
			}
		} else if second.Type != "sent" || !got.Deleted || got.Body != "" {
			t.Fatalf("delete after edit: %s, folded %+v", second, got)
		}
	}
}
