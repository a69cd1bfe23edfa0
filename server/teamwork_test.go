package server_test

import (
	"encoding/json"
	"net/http"
	"reflect"
	"testing"
)

// teamMessage is a message with the v1.1 fields (messageJSON stays
// comparable for the v1 tests).
type teamMessage struct {
	Conv        string         `json:"conv"`
	Seq         int64          `json:"seq"`
	From        string         `json:"from"`
	ClientMsgID string         `json:"client_msg_id"`
	Kind        string         `json:"kind"`
	Body        string         `json:"body"`
	TS          int64          `json:"ts"`
	Target      int64          `json:"target"`
	Emoji       string         `json:"emoji"`
	On          *bool          `json:"on"`
	ReplyTo     int64          `json:"reply_to"`
	Mentions    []string       `json:"mentions"`
	EditedAt    int64          `json:"edited_at"`
	Deleted     bool           `json:"deleted"`
	Reactions   []reactionJSON `json:"reactions"`
}

type reactionJSON struct {
	Emoji string   `json:"emoji"`
	Users []string `json:"users"`
}

// teamMessage decodes the message of a msg or sent frame.
func (f frame) teamMessage() teamMessage {
	var m teamMessage
	_ = json.Unmarshal(f.RawMessage, &m)
	return m
}

// pull returns every message of conv the account may see, folded.
func (a *account) pull(t testing.TB, conv string) []teamMessage {
	t.Helper()
	var p struct {
		Messages []teamMessage `json:"messages"`
	}
	a.get(t, convPath(conv, "messages")+"?after_seq=0&limit=1000").want(t, http.StatusOK).decode(t, &p)
	return p.Messages
}

// Helpers for v1.1 sends: a mutation or reply goes through the same
// POST .../messages as text.

func (a *account) sendKind(t testing.TB, conv string, fields map[string]any) response {
	t.Helper()
	if _, ok := fields["client_msg_id"]; !ok {
		fields["client_msg_id"] = a.ts.unique("m")
	}
	return a.post(t, convPath(conv, "messages"), fields)
}

func (a *account) mutate(t testing.TB, conv string, fields map[string]any) teamMessage {
	t.Helper()
	r := a.sendKind(t, conv, fields).want(t, http.StatusCreated)
	var reply struct {
		Message teamMessage `json:"message"`
	}
	r.decode(t, &reply)
	return reply.Message
}

func (a *account) edit(t testing.TB, conv string, target int64, body string) teamMessage {
	t.Helper()
	return a.mutate(t, conv, map[string]any{"kind": "edit", "target": target, "body": body})
}

func (a *account) react(t testing.TB, conv string, target int64, emoji string, on bool) teamMessage {
	t.Helper()
	return a.mutate(t, conv, map[string]any{"kind": "reaction", "target": target, "emoji": emoji, "on": on})
}

func (a *account) remove(t testing.TB, conv string, target int64) teamMessage {
	t.Helper()
	return a.mutate(t, conv, map[string]any{"kind": "delete", "target": target})
}

// message pulls one message by seq.
func (a *account) message(t testing.TB, conv string, seq int64) teamMessage {
	t.Helper()
	for _, m := range a.pull(t, conv) {
		if m.Seq == seq {
			return m
		}
	}
	t.Fatalf("%s: seq %d not in the pull of %s", a.User.Username, seq, conv)
	return teamMessage{}
}

// TestMutationsAreMessages follows one message through an edit, reactions
// and a delete: each mutation gets a seq, reaches the other member live as
// stored, and pulls return the message folded.
func TestMutationsAreMessages(t *testing.T) {
	ts := newServer(t)
	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	g := alice.group(t, "team", bob)
	ws := bob.dial(t, "bob")

	m := alice.send(t, g.ID, "t1", "helo wrld")
	e := alice.edit(t, g.ID, m.Seq, "hello world")
	if e.Kind != "edit" || e.Target != m.Seq || e.Seq != m.Seq+1 || e.Body != "hello world" {
		t.Fatalf("edit stored as %+v", e)
	}
	ws.write(t, map[string]any{"type": "send", "req": "r1", "conv": g.ID, "client_msg_id": "b1", "kind": "reaction", "target": m.Seq, "emoji": "👍", "on": true})
	if f := ws.next(t, "sent r1", withReq("r1")); f.Type != "sent" || f.teamMessage().Body != "" || f.teamMessage().Emoji != "👍" || f.teamMessage().On == nil || !*f.teamMessage().On {
		t.Fatalf("reaction over WebSocket: %s", f)
	}
	alice.react(t, g.ID, m.Seq, "🎉", true)
	alice.react(t, g.ID, m.Seq, "👍", true)
	off := alice.react(t, g.ID, m.Seq, "🎉", false)
	if off.On == nil || *off.On {
		t.Fatalf("reaction off stored as %+v", off)
	}

	got := bob.message(t, g.ID, m.Seq)
	if got.Body != "hello world" || got.EditedAt != e.TS || got.Deleted {
		t.Fatalf("folded after edit: %+v", got)
	}
	want := []reactionJSON{{Emoji: "👍", Users: []string{bob.ID(), alice.ID()}}}
	if !reflect.DeepEqual(got.Reactions, want) {
		t.Fatalf("reactions = %+v, want %+v", got.Reactions, want)
	}
	// Live: bob got alice's mutations as stored (his own reaction came as
	// sent), in seq order.
	live := ws.waitLive(t, g.ID, 5)
	kinds := []string{}
	for _, l := range live {
		kinds = append(kinds, l.Kind)
	}
	if !reflect.DeepEqual(kinds, []string{"text", "edit", "reaction", "reaction", "reaction"}) {
		t.Fatalf("live kinds = %v", kinds)
	}

	del := alice.remove(t, g.ID, m.Seq)
	if del.Kind != "delete" || del.Body != "" || del.Target != m.Seq {
		t.Fatalf("delete stored as %+v", del)
	}
	got = bob.message(t, g.ID, m.Seq)
	if !got.Deleted || got.Body != "" || len(got.Reactions) != 0 {
		t.Fatalf("folded after delete: %+v", got)
	}
	for _, x := range bob.pull(t, g.ID) {
		if x.Kind == "edit" && x.Body != "" {
			t.Fatalf("edit keeps its body after the delete: %+v", x)
		}
	}
	// Every v1 field in every kind, on the wire.
	r := bob.get(t, convPath(g.ID, "messages")+"?after_seq=0").want(t, http.StatusOK)
	for _, x := range r.JSON["messages"].([]any) {
		for _, k := range []string{"conv", "seq", "from", "client_msg_id", "kind", "body", "ts"} {
			if _, ok := x.(map[string]any)[k]; !ok {
				t.Fatalf("message without %s: %v", k, x)
			}
		}
	}
	// A retry of the edit is answered with its first result although the
	// target is deleted now.
	r = alice.sendKind(t, g.ID, map[string]any{"client_msg_id": e.ClientMsgID, "kind": "edit", "target": m.Seq, "body": "hello world"}).want(t, http.StatusOK)
	if r.JSON["duplicate"] != true || int64(r.JSON["message"].(map[string]any)["seq"].(float64)) != e.Seq {
		t.Fatalf("retried edit: %s", r)
	}
}

// TestUnreadCountsText: mutations and deleted messages are not unread, and
// last_message is the newest text message still there.
func TestUnreadCountsText(t *testing.T) {
	ts := newServer(t)
	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	d := alice.direct(t, bob)
	m1 := alice.send(t, d.ID, "a1", "first")
	m2 := alice.send(t, d.ID, "a2", "second")
	alice.react(t, d.ID, m1.Seq, "👍", true)
	alice.edit(t, d.ID, m1.Seq, "first, edited")
	c := bob.conversation(t, d.ID)
	if c.Unread != 2 || c.LastMessage == nil || c.LastMessage.Seq != m2.Seq {
		t.Fatalf("after a reaction and an edit: unread %d, last %+v", c.Unread, c.LastMessage)
	}
	alice.remove(t, d.ID, m2.Seq)
	c = bob.conversation(t, d.ID)
	if c.Unread != 1 || c.LastMessage == nil || c.LastMessage.Seq != m1.Seq || c.LastMessage.Body != "first, edited" {
		t.Fatalf("after deleting the last: unread %d, last %+v", c.Unread, c.LastMessage)
	}
	if c.Mentions == nil || *c.Mentions != 0 {
		t.Fatalf("mentions = %v, want 0 and present", c.Mentions)
	}
	// Read and ack cover every seq.
	bob.post(t, convPath(d.ID, "read"), map[string]any{"seq": c.MaxSeq}).want(t, http.StatusNoContent)
	if c = bob.conversation(t, d.ID); c.Unread != 0 || c.ReadSeq != c.MaxSeq {
		t.Fatalf("after reading: %+v", c)
	}
}

// TestDeleteRights: the sender deletes; in a group owners and admins too;
// in a direct conversation the peer may not.
func TestDeleteRights(t *testing.T) {
	ts := newServer(t)
	alice, bob, carol := ts.register(t, "alice"), ts.register(t, "bob"), ts.register(t, "carol")
	g := alice.group(t, "team", bob, carol)
	m := bob.send(t, g.ID, "b1", "oops")
	carol.sendKind(t, g.ID, map[string]any{"kind": "delete", "target": m.Seq}).wantError(t, http.StatusForbidden, "forbidden")
	alice.remove(t, g.ID, m.Seq) // the owner
	d := alice.direct(t, bob)
	m = alice.send(t, d.ID, "a1", "mine")
	bob.sendKind(t, d.ID, map[string]any{"kind": "delete", "target": m.Seq}).wantError(t, http.StatusForbidden, "forbidden")
	bob.sendKind(t, d.ID, map[string]any{"kind": "edit", "target": m.Seq, "body": "x"}).wantError(t, http.StatusForbidden, "forbidden")
	alice.remove(t, d.ID, m.Seq)
}

// TestRepliesAndMentions: reply_to is kept; @names of members become
// mentions (ignoring case; @all in groups); the entry counts the unread
// ones; an edit recomputes them.
func TestRepliesAndMentions(t *testing.T) {
	ts := newServer(t)
	alice, bob, carol := ts.register(t, "alice"), ts.register(t, "bob"), ts.register(t, "carol")
	g := alice.group(t, "team", bob, carol)
	q := alice.send(t, g.ID, "a1", "who is in?")
	r := bob.mutate(t, g.ID, map[string]any{"body": "me, @Alice and @carol. not mail@alice or @nobody", "reply_to": q.Seq})
	if r.ReplyTo != q.Seq || !reflect.DeepEqual(r.Mentions, []string{alice.ID(), carol.ID()}) {
		t.Fatalf("reply stored as %+v", r)
	}
	if c := alice.conversation(t, g.ID); c.Mentions == nil || *c.Mentions != 1 {
		t.Fatalf("alice's mentions = %v, want 1", c.Mentions)
	}
	all := alice.send(t, g.ID, "a2", "@all lunch")
	if c := bob.conversation(t, g.ID); *c.Mentions != 1 {
		t.Fatalf("bob's mentions after @all = %d, want 1", *c.Mentions)
	}
	if c := carol.conversation(t, g.ID); *c.Mentions != 2 {
		t.Fatalf("carol's mentions = %d, want 2", *c.Mentions)
	}
	e := bob.edit(t, g.ID, r.Seq, "me and @alice")
	if !reflect.DeepEqual(e.Mentions, []string{alice.ID()}) {
		t.Fatalf("edit's mentions = %v", e.Mentions)
	}
	if c := carol.conversation(t, g.ID); *c.Mentions != 1 {
		t.Fatalf("carol's mentions after the edit = %d, want 1", *c.Mentions)
	}
	if got := alice.message(t, g.ID, r.Seq); !reflect.DeepEqual(got.Mentions, []string{alice.ID()}) || got.ReplyTo != q.Seq {
		t.Fatalf("folded reply: %+v", got)
	}
	carol.post(t, convPath(g.ID, "read"), map[string]any{"seq": all.Seq}).want(t, http.StatusNoContent)
	if c := carol.conversation(t, g.ID); *c.Mentions != 0 {
		t.Fatalf("carol's mentions after reading = %d, want 0", *c.Mentions)
	}
	bob.remove(t, g.ID, r.Seq)
	if c := alice.conversation(t, g.ID); *c.Mentions != 0 {
		t.Fatalf("alice's mentions after the delete = %d, want 0", *c.Mentions)
	}
}

// TestReplyToAnyMessage: PROTOCOL.md v1.1 has reply_to name the "seq of a
// message of the same conversation", refused (404) only when it does not
// exist or lies outside the sender's visible range; unlike a mutation's
// target it need not be a text message. A reply to an edit, a reaction or
// a delete was refused as not_found.
func TestReplyToAnyMessage(t *testing.T) {
	ts := newServer(t)
	alice, bob, carol := ts.register(t, "alice"), ts.register(t, "bob"), ts.register(t, "carol")
	g := alice.group(t, "team", bob)
	m := alice.send(t, g.ID, "a1", "first")
	gone := alice.send(t, g.ID, "a2", "to delete")
	edit := alice.edit(t, g.ID, m.Seq, "first, edited")
	reaction := bob.react(t, g.ID, m.Seq, "👍", true)
	del := alice.remove(t, g.ID, gone.Seq)
	for _, to := range []teamMessage{edit, reaction, del} {
		r := bob.mutate(t, g.ID, map[string]any{"body": "re " + to.Kind, "reply_to": to.Seq})
		if r.ReplyTo != to.Seq {
			t.Errorf("reply to the %s: stored as %+v", to.Kind, r)
		}
		if got := alice.message(t, g.ID, r.Seq); got.ReplyTo != to.Seq {
			t.Errorf("reply to the %s: pulled as %+v", to.Kind, got)
		}
	}
	// Outside the visible range it is still not found.
	alice.post(t, convPath(g.ID, "members"), map[string]any{"user_ids": []string{carol.ID()}}).want(t, http.StatusOK)
	carol.sendKind(t, g.ID, map[string]any{"body": "re", "reply_to": reaction.Seq}).wantError(t, http.StatusNotFound, "not_found")
}
