package server_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/imserver/imserver/server"
)

func TestDirectConversation(t *testing.T) {
	ts := newServer(t)
	alice, bob, carol := ts.register(t, "alice"), ts.register(t, "bob"), ts.register(t, "carol")

	r := alice.post(t, "/api/v1/conversations/direct", map[string]string{"user_id": bob.ID()}).want(t, http.StatusCreated)
	var first struct {
		Conversation conversationJSON `json:"conversation"`
	}
	r.decode(t, &first)
	c := first.Conversation
	if c.ID == "" {
		t.Fatalf("no id: %s", r)
	}
	if got, want := c.Kind, "direct"; got != want {
		t.Errorf("kind: got %q, want %q", got, want)
	}
	if got, want := c.MembersCount, 2; got != want {
		t.Errorf("members_count: got %d, want %d", got, want)
	}
	if c.MaxSeq != 0 || c.Unread != 0 || c.Left {
		t.Errorf("new conversation: got %+v", c)
	}

	// The same pair, either way round, always gets the same conversation.
	r = alice.post(t, "/api/v1/conversations/direct", map[string]string{"user_id": bob.ID()}).want(t, http.StatusOK)
	var again struct {
		Conversation conversationJSON `json:"conversation"`
	}
	r.decode(t, &again)
	if got, want := again.Conversation.ID, c.ID; got != want {
		t.Errorf("second call: got %q, want %q", got, want)
	}
	bob.post(t, "/api/v1/conversations/direct", map[string]string{"user_id": alice.ID()}).want(t, http.StatusOK).decode(t, &again)
	if got, want := again.Conversation.ID, c.ID; got != want {
		t.Errorf("from the peer: got %q, want %q", got, want)
	}
	if other := alice.direct(t, carol); other.ID == c.ID {
		t.Errorf("alice-carol got alice-bob's conversation %q", c.ID)
	}

	alice.post(t, "/api/v1/conversations/direct", map[string]string{"user_id": alice.ID()}).wantError(t, http.StatusBadRequest, "bad_request")
	alice.post(t, "/api/v1/conversations/direct", map[string]string{"user_id": "no-such-user"}).wantError(t, http.StatusNotFound, "not_found")
	alice.post(t, "/api/v1/conversations/direct", map[string]string{}).wantError(t, http.StatusBadRequest, "bad_request")

	// Nobody leaves or is removed from a direct conversation; a third user
	// is not in it.
	alice.post(t, convPath(c.ID, "leave"), nil).wantError(t, http.StatusBadRequest, "bad_request")
	carol.get(t, convPath(c.ID)).wantError(t, http.StatusForbidden, "not_member")
	carol.get(t, convPath(c.ID, "messages")).wantError(t, http.StatusForbidden, "not_member")
}

func TestDirectConcurrent(t *testing.T) {
	ts := newServer(t)
	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	const n = 10
	type result struct {
		status int
		id     string
		err    error
	}
	results := make([]result, 2*n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range results {
		me, peer := alice, bob
		if i%2 == 1 {
			me, peer = bob, alice
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			r, err := ts.doErr("POST", "/api/v1/conversations/direct", me.Token, map[string]string{"user_id": peer.ID()}, nil)
			res := result{status: r.Status, err: err}
			if c, ok := r.JSON["conversation"].(map[string]any); ok {
				res.id, _ = c["id"].(string)
			}
			results[i] = res
		}()
	}
	close(start)
	wg.Wait()
	created := 0
	for i, r := range results {
		if r.err != nil {
			t.Fatalf("call %d: %v", i, r.err)
		}
		switch r.status {
		case http.StatusCreated:
			created++
		case http.StatusOK:
		default:
			t.Errorf("call %d: status %d", i, r.status)
		}
		if r.id == "" || r.id != results[0].id {
			t.Errorf("call %d: conversation %q, call 0 got %q", i, r.id, results[0].id)
		}
	}
	if created != 1 {
		t.Errorf("%d calls answered 201, want 1", created)
	}
	if ch := alice.changes(t, 0, 0); len(ch.Conversations) != 1 {
		t.Errorf("alice has %d conversations, want 1", len(ch.Conversations))
	}
}

func TestGroup(t *testing.T) {
	ts := newServer(t)
	alice, bob, carol := ts.register(t, "alice"), ts.register(t, "bob"), ts.register(t, "carol")
	bobWS := bob.dial(t, "bob")

	g := alice.group(t, "team", bob, carol, bob)
	// Members online are told of the new conversation.
	f := bobWS.next(t, "conversation frame", ofType("conversation"))
	if f.Conversation == nil || f.Conversation.ID != g.ID || f.Conversation.Role != "member" || f.Conversation.Kind != "group" {
		t.Errorf("bob's conversation frame: got %s", f)
	}
	if got, want := g.Kind, "group"; got != want {
		t.Errorf("kind: got %q, want %q", got, want)
	}
	if got, want := g.Name, "team"; got != want {
		t.Errorf("name: got %q, want %q", got, want)
	}
	if got, want := g.MembersCount, 3; got != want {
		t.Errorf("members_count: got %d, want %d", got, want)
	}
	if got, want := g.Role, "owner"; got != want {
		t.Errorf("creator's role: got %q, want %q", got, want)
	}
	roles := map[string]string{}
	for _, m := range alice.members(t, g.ID) {
		roles[m.UserID] = m.Role
	}
	want := map[string]string{alice.ID(): "owner", bob.ID(): "member", carol.ID(): "member"}
	if len(roles) != len(want) {
		t.Errorf("members: got %v, want %v", roles, want)
	}
	for id, role := range want {
		if roles[id] != role {
			t.Errorf("role of %s: got %q, want %q", id, roles[id], role)
		}
	}
	if got, want := bob.conversation(t, g.ID).Role, "member"; got != want {
		t.Errorf("bob's role: got %q, want %q", got, want)
	}

	// The creator need not list itself, and may list itself.
	if g2 := alice.group(t, "solo", alice); g2.MembersCount != 1 {
		t.Errorf("group of one: members_count %d", g2.MembersCount)
	}

	alice.post(t, "/api/v1/groups", map[string]any{"name": "", "member_ids": []string{}}).wantError(t, http.StatusBadRequest, "bad_request")
	alice.post(t, "/api/v1/groups", map[string]any{"name": "x", "member_ids": []string{"nobody"}}).wantError(t, http.StatusNotFound, "not_found")
	alice.post(t, "/api/v1/groups", map[string]any{"name": "x", "member_ids": "bob"}).wantError(t, http.StatusBadRequest, "bad_request")
}

func TestUnknownConversation(t *testing.T) {
	ts := newServer(t)
	alice := ts.register(t, "alice")
	const missing = "no-such-conversation"
	alice.get(t, convPath(missing)).wantError(t, http.StatusNotFound, "not_found")
	alice.get(t, convPath(missing, "messages")).wantError(t, http.StatusNotFound, "not_found")
	alice.get(t, convPath(missing, "members")).wantError(t, http.StatusNotFound, "not_found")
	alice.post(t, convPath(missing, "messages"), map[string]string{"client_msg_id": "1", "body": "x"}).wantError(t, http.StatusNotFound, "not_found")
	alice.post(t, convPath(missing, "ack"), map[string]int{"seq": 1}).wantError(t, http.StatusNotFound, "not_found")
	alice.post(t, convPath(missing, "read"), map[string]int{"seq": 1}).wantError(t, http.StatusNotFound, "not_found")
	alice.post(t, convPath(missing, "clear"), nil).wantError(t, http.StatusNotFound, "not_found")
	alice.post(t, convPath(missing, "leave"), nil).wantError(t, http.StatusNotFound, "not_found")
	alice.post(t, convPath(missing, "members"), map[string]any{"user_ids": []string{alice.ID()}}).wantError(t, http.StatusNotFound, "not_found")
	alice.del(t, convPath(missing, "members", alice.ID())).wantError(t, http.StatusNotFound, "not_found")

	c := alice.dial(t, "ws")
	for _, f := range []map[string]any{
		{"type": "send", "conv": missing, "client_msg_id": "1", "body": "x"},
		{"type": "sync", "conv": missing, "after_seq": 0},
		{"type": "ack", "conv": missing, "seq": 1},
		{"type": "read", "conv": missing, "seq": 1},
	} {
		r := c.call(t, f)
		if r.Type != "error" || r.Code != "not_found" {
			t.Errorf("%v: got %s, want error not_found", f["type"], r)
		}
	}
}

func TestNonMember(t *testing.T) {
	ts := newServer(t)
	alice, bob, mallory := ts.register(t, "alice"), ts.register(t, "bob"), ts.register(t, "mallory")
	g := alice.group(t, "team", bob)
	alice.send(t, g.ID, "1", "secret")

	mallory.get(t, convPath(g.ID)).wantError(t, http.StatusForbidden, "not_member")
	mallory.get(t, convPath(g.ID, "messages")).wantError(t, http.StatusForbidden, "not_member")
	mallory.get(t, convPath(g.ID, "messages")+"?before_seq=10").wantError(t, http.StatusForbidden, "not_member")
	mallory.get(t, convPath(g.ID, "members")).wantError(t, http.StatusForbidden, "not_member")
	mallory.post(t, convPath(g.ID, "messages"), map[string]string{"client_msg_id": "1", "body": "x"}).wantError(t, http.StatusForbidden, "not_member")
	mallory.post(t, convPath(g.ID, "ack"), map[string]int{"seq": 1}).wantError(t, http.StatusForbidden, "not_member")
	mallory.post(t, convPath(g.ID, "read"), map[string]int{"seq": 1}).wantError(t, http.StatusForbidden, "not_member")
	mallory.post(t, convPath(g.ID, "clear"), nil).wantError(t, http.StatusForbidden, "not_member")
	mallory.post(t, convPath(g.ID, "leave"), nil).wantError(t, http.StatusForbidden, "not_member")
	mallory.post(t, convPath(g.ID, "members"), map[string]any{"user_ids": []string{mallory.ID()}}).wantError(t, http.StatusForbidden, "not_member")
	mallory.del(t, convPath(g.ID, "members", bob.ID())).wantError(t, http.StatusForbidden, "not_member")

	c := mallory.dial(t, "ws")
	for _, f := range []map[string]any{
		{"type": "send", "conv": g.ID, "client_msg_id": "1", "body": "x"},
		{"type": "sync", "conv": g.ID, "after_seq": 0},
		{"type": "ack", "conv": g.ID, "seq": 1},
		{"type": "read", "conv": g.ID, "seq": 1},
	} {
		r := c.call(t, f)
		if r.Type != "error" || r.Code != "not_member" {
			t.Errorf("%v: got %s, want error not_member", f["type"], r)
		}
	}
	if got := len(alice.all(t, g.ID)); got != 1 {
		t.Errorf("alice sees %d messages, want 1", got)
	}
}

func TestAddMembers(t *testing.T) {
	ts := newServer(t)
	alice, bob, carol, dave := ts.register(t, "alice"), ts.register(t, "bob"), ts.register(t, "carol"), ts.register(t, "dave")
	g := alice.group(t, "team", bob)
	before := alice.sendN(t, g.ID, 3)
	carolWS := carol.dial(t, "carol")

	r := bob.post(t, convPath(g.ID, "members"), map[string]any{"user_ids": []string{carol.ID(), alice.ID()}}).want(t, http.StatusOK)
	var reply struct {
		Added []string `json:"added"`
	}
	r.decode(t, &reply)
	if len(reply.Added) != 1 || reply.Added[0] != carol.ID() {
		t.Errorf("added: got %v, want [%s]", reply.Added, carol.ID())
	}

	// Carol is told of her new conversation, and sees nothing before it.
	f := carolWS.next(t, "conversation frame", func(f frame) bool {
		return f.Type == "conversation" && f.Conversation != nil && f.Conversation.ID == g.ID
	})
	if got, want := f.Conversation.MinSeq, int64(4); got != want {
		t.Errorf("conversation frame min_seq: got %d, want %d", got, want)
	}
	c := carol.conversation(t, g.ID)
	if got, want := c.MinSeq, before[2].Seq+1; got != want {
		t.Errorf("min_seq: got %d, want max_seq+1 = %d", got, want)
	}
	if c.Unread != 0 || c.LastMessage != nil {
		t.Errorf("new member's entry: unread %d, last_message %+v; want 0 and none", c.Unread, c.LastMessage)
	}
	if got, want := c.MembersCount, 3; got != want {
		t.Errorf("members_count: got %d, want %d", got, want)
	}
	if got, want := c.Role, "member"; got != want {
		t.Errorf("role: got %q, want %q", got, want)
	}
	p := carol.page(t, g.ID, "after_seq=0")
	if len(p.Messages) != 0 || !p.Completed {
		t.Errorf("forward page before any new message: got %+v, want empty and completed", p)
	}
	p = carol.page(t, g.ID, "before_seq=100")
	if len(p.Messages) != 0 || !p.Completed {
		t.Errorf("backward page before any new message: got %+v, want empty and completed", p)
	}
	if f := carolWS.call(t, map[string]any{"type": "sync", "conv": g.ID, "after_seq": 0}); len(f.Messages) != 0 || !f.Completed {
		t.Errorf("sync before any new message: got %s", f)
	}

	after := bob.send(t, g.ID, "hello carol", "welcome")
	if got := carolWS.waitLive(t, g.ID, 1); got[0] != after {
		t.Errorf("carol's live message: got %+v, want %+v", got[0], after)
	}
	if got, want := seqsOf(carol.all(t, g.ID)), []int64{after.Seq}; !equalSeqs(got, want) {
		t.Errorf("carol sees %v, want %v", got, want)
	}
	if got, want := seqsOf(carol.page(t, g.ID, "before_seq=100").Messages), []int64{after.Seq}; !equalSeqs(got, want) {
		t.Errorf("carol's backward page: got %v, want %v", got, want)
	}
	if got, want := len(alice.all(t, g.ID)), 4; got != want {
		t.Errorf("alice sees %d messages, want %d", got, want)
	}
	if got := len(carolWS.liveMessages(g.ID)); got != 1 {
		t.Errorf("carol got %d live messages, want 1", got)
	}

	// Only groups take members; users must exist.
	d := alice.direct(t, bob)
	alice.post(t, convPath(d.ID, "members"), map[string]any{"user_ids": []string{dave.ID()}}).wantError(t, http.StatusBadRequest, "bad_request")
	alice.post(t, convPath(g.ID, "members"), map[string]any{"user_ids": []string{"nobody"}}).wantError(t, http.StatusNotFound, "not_found")
	alice.post(t, convPath(g.ID, "members"), map[string]any{"user_ids": []string{}}).wantError(t, http.StatusBadRequest, "bad_request")
}

func TestKick(t *testing.T) {
	ts := newServer(t)
	alice, bob, carol := ts.register(t, "alice"), ts.register(t, "bob"), ts.register(t, "carol")
	g := alice.group(t, "team", bob, carol)
	carolWS := carol.dial(t, "carol")
	bobWS := bob.dial(t, "bob")

	// A member without the right is refused.
	bob.del(t, convPath(g.ID, "members", carol.ID())).wantError(t, http.StatusForbidden, "forbidden")
	bob.del(t, convPath(g.ID, "members", alice.ID())).wantError(t, http.StatusForbidden, "forbidden")

	seen := alice.sendN(t, g.ID, 2)
	carolWS.waitLive(t, g.ID, 2)
	alice.del(t, convPath(g.ID, "members", carol.ID())).want(t, http.StatusNoContent)
	f := carolWS.next(t, "conversation frame with left", func(f frame) bool {
		return f.Type == "conversation" && f.Conversation != nil && f.Conversation.ID == g.ID && f.Conversation.Left
	})
	if got, want := f.Conversation.MaxSeq, seen[1].Seq; got != want {
		t.Errorf("kick frame max_seq: got %d, want %d", got, want)
	}
	alice.del(t, convPath(g.ID, "members", carol.ID())).wantError(t, http.StatusNotFound, "not_found")

	unseen := alice.send(t, g.ID, "after kick", "carol must not see this")
	bobWS.waitLive(t, g.ID, 3)

	// Carol keeps her entry, marked left, and read access up to the kick.
	c := carol.conversation(t, g.ID)
	if !c.Left {
		t.Errorf("kicked entry: left is false")
	}
	if got, want := c.MaxSeq, seen[1].Seq; got != want {
		t.Errorf("kicked entry max_seq: got %d, want %d", got, want)
	}
	if c.LastMessage != nil && c.LastMessage.Seq > seen[1].Seq {
		t.Errorf("kicked entry shows a later message: %+v", c.LastMessage)
	}
	if got, want := seqsOf(carol.all(t, g.ID)), seqsOf(seen); !equalSeqs(got, want) {
		t.Errorf("kicked member sees %v, want %v", got, want)
	}
	p := carol.page(t, g.ID, "before_seq=1000")
	if got, want := seqsOf(p.Messages), seqsOf(seen); !equalSeqs(got, want) || !p.Completed || p.MaxSeq != seen[1].Seq {
		t.Errorf("kicked member's backward page: got %+v, want %v completed, max_seq %d", p, want, seen[1].Seq)
	}
	p = carol.page(t, g.ID, "after_seq=1")
	if got, want := seqsOf(p.Messages), []int64{2}; !equalSeqs(got, want) || !p.Completed {
		t.Errorf("kicked member's page after 1: got %+v, want %v completed", p, want)
	}
	if sf := carolWS.call(t, map[string]any{"type": "sync", "conv": g.ID, "after_seq": 0}); !equalSeqs(seqsOf(sf.Messages), seqsOf(seen)) || sf.MaxSeq != seen[1].Seq {
		t.Errorf("kicked member's sync: got %s", sf)
	}
	carolWS.ping(t)
	if carolWS.hasLiveSeq(g.ID, unseen.Seq) {
		t.Errorf("kicked member got message %d live", unseen.Seq)
	}

	// She is no longer a member: not listed, cannot send or list members.
	for _, m := range alice.members(t, g.ID) {
		if m.UserID == carol.ID() {
			t.Errorf("kicked member still listed: %+v", m)
		}
	}
	if got, want := alice.conversation(t, g.ID).MembersCount, 2; got != want {
		t.Errorf("members_count after kick: got %d, want %d", got, want)
	}
	carol.post(t, convPath(g.ID, "messages"), map[string]string{"client_msg_id": "x", "body": "x"}).wantError(t, http.StatusForbidden, "not_member")
	carol.get(t, convPath(g.ID, "members")).wantError(t, http.StatusForbidden, "not_member")
	carol.del(t, convPath(g.ID, "members", bob.ID())).wantError(t, http.StatusForbidden, "not_member")
	if r := carolWS.sendWS(t, g.ID, "y", "y"); r.Type != "error" || r.Code != "not_member" {
		t.Errorf("kicked member's WS send: got %s, want error not_member", r)
	}
	// She may still mark what she saw as read, up to the kick.
	carol.post(t, convPath(g.ID, "read"), map[string]int{"seq": 1000}).want(t, http.StatusNoContent)
	if got, want := carol.conversation(t, g.ID).ReadSeq, seen[1].Seq; got != want {
		t.Errorf("kicked member's read_seq: got %d, want %d (clamped to the kick)", got, want)
	}

	// Added again, she sees only what comes after.
	alice.post(t, convPath(g.ID, "members"), map[string]any{"user_ids": []string{carol.ID()}}).want(t, http.StatusOK)
	back := alice.send(t, g.ID, "welcome back", "hi again")
	if got, want := seqsOf(carol.all(t, g.ID)), []int64{back.Seq}; !equalSeqs(got, want) {
		t.Errorf("rejoined member sees %v, want %v", got, want)
	}
	if carol.conversation(t, g.ID).Left {
		t.Errorf("rejoined member's entry is still left")
	}
}

func TestLeave(t *testing.T) {
	ts := newServer(t)
	alice, bob, carol := ts.register(t, "alice"), ts.register(t, "bob"), ts.register(t, "carol")
	g := alice.group(t, "team", bob, carol)
	seen := alice.sendN(t, g.ID, 2)

	bob.post(t, convPath(g.ID, "leave"), nil).want(t, http.StatusNoContent)
	alice.send(t, g.ID, "after", "bob is gone")

	c := bob.conversation(t, g.ID)
	if !c.Left || c.MaxSeq != seen[1].Seq {
		t.Errorf("departed entry: got left=%v max_seq=%d, want true and %d", c.Left, c.MaxSeq, seen[1].Seq)
	}
	if got, want := seqsOf(bob.all(t, g.ID)), seqsOf(seen); !equalSeqs(got, want) {
		t.Errorf("departed member sees %v, want %v", got, want)
	}
	for _, m := range alice.members(t, g.ID) {
		if m.UserID == bob.ID() {
			t.Errorf("departed member still listed")
		}
	}
	bob.post(t, convPath(g.ID, "leave"), nil).wantError(t, http.StatusForbidden, "not_member")

	// When the owner leaves, someone else owns the group, and hears of its
	// changed entry.
	wc := carol.dial(t, "carol")
	alice.post(t, convPath(g.ID, "leave"), nil).want(t, http.StatusNoContent)
	ms := carol.members(t, g.ID)
	if len(ms) != 1 || ms[0].UserID != carol.ID() || ms[0].Role != "owner" {
		t.Errorf("after the owner left: members %+v, want carol as owner", ms)
	}
	wc.next(t, "carol's entry as owner", func(f frame) bool {
		return f.Type == "conversation" && strings.Contains(string(f.raw), `"role":"owner"`)
	})
}

func TestClearHistory(t *testing.T) {
	ts := newServer(t)
	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	d := alice.direct(t, bob)
	sent := alice.sendN(t, d.ID, 3)
	if got, want := bob.conversation(t, d.ID).Unread, int64(3); got != want {
		t.Errorf("unread before clear: got %d, want %d", got, want)
	}

	bob.post(t, convPath(d.ID, "clear"), nil).want(t, http.StatusNoContent)
	c := bob.conversation(t, d.ID)
	maxSeq := sent[2].Seq
	if got, want := c.MinSeq, maxSeq+1; got != want {
		t.Errorf("min_seq after clear: got %d, want %d", got, want)
	}
	if got, want := c.ReadSeq, maxSeq; got != want {
		t.Errorf("read_seq after clear: got %d, want %d", got, want)
	}
	if c.Unread != 0 || c.LastMessage != nil {
		t.Errorf("after clear: unread %d, last_message %+v; want 0 and none", c.Unread, c.LastMessage)
	}
	if got := bob.all(t, d.ID); len(got) != 0 {
		t.Errorf("after clear bob sees %v", seqsOf(got))
	}
	if p := bob.page(t, d.ID, "before_seq=100"); len(p.Messages) != 0 || !p.Completed {
		t.Errorf("backward page after clear: got %+v", p)
	}

	next := alice.send(t, d.ID, "new", "after the clear")
	if got, want := seqsOf(bob.all(t, d.ID)), []int64{next.Seq}; !equalSeqs(got, want) {
		t.Errorf("bob sees %v, want %v", got, want)
	}
	if got, want := bob.conversation(t, d.ID).Unread, int64(1); got != want {
		t.Errorf("unread: got %d, want %d", got, want)
	}
	// Only bob's history was cleared.
	if got, want := len(alice.all(t, d.ID)), 4; got != want {
		t.Errorf("alice sees %d messages, want %d", got, want)
	}
}

// Roles: the owner makes admins (who may then remove members) and hands
// the group over; nobody else changes a role, and a changed role reaches
// the member's entry live and by sync.
func TestSetRole(t *testing.T) {
	ts := newServer(t)
	alice, bob, carol, dave := ts.register(t, "alice"), ts.register(t, "bob"), ts.register(t, "carol"), ts.register(t, "dave")
	g := alice.group(t, "team", bob, carol, dave)
	role := func(as *account, who *account) string {
		t.Helper()
		for _, m := range as.members(t, g.ID) {
			if m.UserID == who.ID() {
				return m.Role
			}
		}
		t.Fatalf("%s is not listed", who.User.Username)
		return ""
	}
	member := func(id string) string { return convPath(g.ID, "members", id) }

	// Bob, a member, may neither remove carol nor make himself admin.
	bob.del(t, member(carol.ID())).wantError(t, http.StatusForbidden, "forbidden")
	ts.do(t, "PATCH", member(bob.ID()), bob.Token, map[string]string{"role": "admin"}).wantError(t, http.StatusForbidden, "forbidden")

	bobWS := bob.dial(t, "bob")
	since := bob.sequences(t)
	ts.do(t, "PATCH", member(bob.ID()), alice.Token, map[string]string{"role": "admin"}).want(t, http.StatusNoContent)
	bobWS.next(t, "bob's entry as admin", func(f frame) bool {
		return f.Type == "conversation" && f.Conversation != nil && f.Conversation.ID == g.ID && f.Conversation.Role == "admin"
	})
	if ch := bob.changes(t, since, 100); len(ch.Conversations) != 1 || ch.Conversations[0].Role != "admin" {
		t.Errorf("bob's sync after the change: %+v", ch.Conversations)
	}
	if got := role(carol, bob); got != "admin" {
		t.Errorf("bob's role as carol lists it: %q", got)
	}
	// The same role again changes nothing, not even a version.
	before := bob.sequences(t)
	ts.do(t, "PATCH", member(bob.ID()), alice.Token, map[string]string{"role": "admin"}).want(t, http.StatusNoContent)
	if after := bob.sequences(t); after != before {
		t.Errorf("the same role again moved bob's version from %d to %d", before, after)
	}

	// An admin removes members and other admins (PROTOCOL.md: "owner/admin
	// only"), never the owner, and changes no role.
	bob.del(t, member(dave.ID())).want(t, http.StatusNoContent)
	ts.do(t, "PATCH", member(carol.ID()), bob.Token, map[string]string{"role": "admin"}).wantError(t, http.StatusForbidden, "forbidden")
	ts.do(t, "PATCH", member(carol.ID()), alice.Token, map[string]string{"role": "admin"}).want(t, http.StatusNoContent)
	bob.del(t, member(alice.ID())).wantError(t, http.StatusForbidden, "forbidden")
	bob.del(t, member(carol.ID())).want(t, http.StatusNoContent)
	ts.do(t, "POST", "/api/v1/conversations/"+g.ID+"/members", alice.Token, map[string]any{"user_ids": []string{carol.ID()}}).want(t, http.StatusOK)
	ts.do(t, "PATCH", member(carol.ID()), alice.Token, map[string]string{"role": "member"}).want(t, http.StatusNoContent)
	if got := role(alice, carol); got != "member" {
		t.Errorf("carol after losing admin: %q", got)
	}

	// Bad input: an unknown role, a user who left or never joined, the
	// owner's own role, a direct conversation.
	ts.do(t, "PATCH", member(carol.ID()), alice.Token, map[string]string{"role": "king"}).wantError(t, http.StatusBadRequest, "bad_request")
	ts.do(t, "PATCH", member(carol.ID()), alice.Token, "{").wantError(t, http.StatusBadRequest, "bad_request")
	ts.do(t, "PATCH", member(dave.ID()), alice.Token, map[string]string{"role": "admin"}).wantError(t, http.StatusNotFound, "not_found")
	ts.do(t, "PATCH", member("nobody"), alice.Token, map[string]string{"role": "admin"}).wantError(t, http.StatusNotFound, "not_found")
	ts.do(t, "PATCH", member(alice.ID()), alice.Token, map[string]string{"role": "member"}).wantError(t, http.StatusBadRequest, "bad_request")
	ts.do(t, "PATCH", member(alice.ID()), alice.Token, map[string]string{"role": "owner"}).wantError(t, http.StatusBadRequest, "bad_request")
	ts.do(t, "PATCH", member(carol.ID()), dave.Token, map[string]string{"role": "king"}).wantError(t, http.StatusForbidden, "not_member")
	ts.do(t, "PATCH", member(carol.ID()), dave.Token, map[string]string{"role": "admin"}).wantError(t, http.StatusForbidden, "not_member")
	d := alice.direct(t, bob)
	ts.do(t, "PATCH", convPath(d.ID, "members", bob.ID()), alice.Token, map[string]string{"role": "admin"}).wantError(t, http.StatusBadRequest, "bad_request")

	// Alice hands the group to carol and is an admin after.
	ts.do(t, "PATCH", member(carol.ID()), alice.Token, map[string]string{"role": "owner"}).want(t, http.StatusNoContent)
	if a, c := role(bob, alice), role(bob, carol); a != "admin" || c != "owner" {
		t.Errorf("after the hand-over: alice %q, carol %q", a, c)
	}
	if got := alice.conversation(t, g.ID).Role; got != "admin" {
		t.Errorf("alice's entry after the hand-over: %q", got)
	}
	ts.do(t, "PATCH", member(bob.ID()), alice.Token, map[string]string{"role": "member"}).wantError(t, http.StatusForbidden, "forbidden")
	ts.do(t, "PATCH", member(bob.ID()), carol.Token, map[string]string{"role": "member"}).want(t, http.StatusNoContent)
}

// TestRenameGroup: the owner and admins rename a group; every member's
// sessions get the renamed entry, and a sync since before shows it.
// Members, strangers, direct conversations and bad names are refused.
func TestRenameGroup(t *testing.T) {
	ts := newServer(t)
	alice, bob, carol, eve := ts.register(t, "alice"), ts.register(t, "bob"), ts.register(t, "carol"), ts.register(t, "eve")
	g := alice.group(t, "team", bob, carol)
	path := convPath(g.ID)
	rename := func(as *account, name string) response {
		t.Helper()
		return ts.do(t, "PATCH", path, as.Token, map[string]string{"name": name})
	}

	bobWS, carolWS := bob.dial(t, "bob"), carol.dial(t, "carol")
	since := carol.sequences(t)
	var got struct {
		Conversation conversationJSON `json:"conversation"`
	}
	rename(alice, "  the team  ").want(t, http.StatusOK).decode(t, &got)
	if got.Conversation.ID != g.ID || got.Conversation.Name != "the team" {
		t.Errorf("rename answered %+v, want the trimmed name", got.Conversation)
	}
	for name, w := range map[string]*wsClient{"bob": bobWS, "carol": carolWS} {
		w.next(t, name+"'s renamed entry", func(f frame) bool {
			return f.Type == "conversation" && f.Conversation != nil && f.Conversation.ID == g.ID && f.Conversation.Name == "the team"
		})
	}
	if ch := carol.changes(t, since, 100); len(ch.Conversations) != 1 || ch.Conversations[0].Name != "the team" {
		t.Errorf("carol's sync after the rename: %+v", ch.Conversations)
	}

	rename(bob, "mine now").wantError(t, http.StatusForbidden, "forbidden")
	ts.do(t, "PATCH", convPath(g.ID, "members", bob.ID()), alice.Token, map[string]string{"role": "admin"}).want(t, http.StatusNoContent)
	rename(bob, "renamed by an admin").want(t, http.StatusOK)
	if c := carol.conversation(t, g.ID); c.Name != "renamed by an admin" {
		t.Errorf("carol's entry after the admin's rename: %q", c.Name)
	}
	// A former member keeps its entry, which shows the name: its sync
	// gets the new one.
	carol.post(t, convPath(g.ID, "leave"), nil).want(t, http.StatusNoContent)
	left := carol.sequences(t)
	rename(alice, "after carol").want(t, http.StatusOK)
	if ch := carol.changes(t, left, 100); len(ch.Conversations) != 1 || ch.Conversations[0].Name != "after carol" || !ch.Conversations[0].Left {
		t.Errorf("the former member's sync after a rename: %+v", ch.Conversations)
	}
	rename(carol, "not hers now").wantError(t, http.StatusForbidden, "not_member")
	rename(eve, "not hers").wantError(t, http.StatusForbidden, "not_member")
	rename(alice, "   ").wantError(t, http.StatusBadRequest, "bad_request")
	rename(alice, strings.Repeat("n", 129)).wantError(t, http.StatusBadRequest, "bad_request")
	d := alice.direct(t, bob)
	ts.do(t, "PATCH", convPath(d.ID), alice.Token, map[string]string{"name": "us"}).wantError(t, http.StatusBadRequest, "bad_request")
	ts.do(t, "PATCH", convPath("nonexistent"), alice.Token, map[string]string{"name": "x"}).wantError(t, http.StatusNotFound, "not_found")
}

// TestKickUnderLoad: messages committed right after a kick never reach the
// kicked member live, while sends keep the writer busy (PROTOCOL guarantee
// 4). Their fan-out may run before the kick's own caller is back; the
// members it meets must already be those after the kick.
func TestKickUnderLoad(t *testing.T) {
	ts := newServer(t, func(c *testConfig) { c.chat.SendRate, c.chat.SendBurst = 1e6, 1e6 })
	alice := ts.register(t, "alice")
	senders := make([]*wsClient, 8)
	for i := range senders {
		senders[i] = alice.dial(t, "alice")
	}
	for round := range 6 {
		bob := ts.register(t, "bob"+strconv.Itoa(round))
		g := alice.group(t, "g", bob)
		bobWS := bob.dial(t, "bob")
		written := make([]int, len(senders))
		for _, c := range senders {
			c.mu.Lock()
			c.frames, c.used = nil, nil // this round's answers only
			c.mu.Unlock()
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for i, c := range senders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// One send in flight, as people send: small commits one
				// after another, none of which fills bob's queue (a full
				// queue cuts his live stream and would hide a leak).
				for n := 0; ; n++ {
					select {
					case <-stop:
						return
					default:
					}
					id := fmt.Sprintf("r%d-s%d-%d", round, i, n)
					if c.writeErr(map[string]any{"type": "send", "req": id, "conv": g.ID, "client_msg_id": id, "body": "load"}) != nil {
						return
					}
					written[i]++
					if c.await(func() bool { return c.answered(id) }) != nil {
						return
					}
				}
			}()
		}
		bobWS.waitLive(t, g.ID, 20)
		alice.del(t, convPath(g.ID, "members", bob.ID())).want(t, http.StatusNoContent)
		time.Sleep(50 * time.Millisecond)
		close(stop)
		wg.Wait()
		for i, c := range senders {
			if n := len(c.received(func(f frame) bool { return f.Type == "sent" })); n != written[i] {
				t.Fatalf("round %d: sender %d: %d of %d sends answered", round, i, n, written[i])
			}
		}
		bound := bob.conversation(t, g.ID).MaxSeq
		bobWS.mu.Lock()
		cut := bobWS.err != nil // a session too slow is closed: it has all it got
		bobWS.mu.Unlock()
		if !cut {
			bobWS.ping(t)
		}
		for _, m := range bobWS.liveMessages(g.ID) {
			if m.Seq > bound {
				t.Fatalf("round %d: the kicked member got seq %d live, past its bound %d", round, m.Seq, bound)
			}
		}
	}
}

// TestMembershipFramesReachMembers: when someone joins, is kicked or
// leaves, every member online gets its entry again (a conversation frame),
// whose members_count changed.
func TestMembershipFramesReachMembers(t *testing.T) {
	ts := newServer(t)
	alice, bob, carol, dave := ts.register(t, "alice"), ts.register(t, "bob"), ts.register(t, "carol"), ts.register(t, "dave")
	g := alice.group(t, "team", bob, carol)
	carolWS := carol.dial(t, "carol")
	entry := func(what string, count int) {
		t.Helper()
		f := carolWS.next(t, what, func(f frame) bool {
			return f.Type == "conversation" && f.Conversation != nil && f.Conversation.ID == g.ID
		})
		if f.Conversation.MembersCount != count || f.Conversation.Left {
			t.Errorf("%s: carol's entry %s, want members_count %d", what, f, count)
		}
	}
	alice.post(t, convPath(g.ID, "members"), map[string]any{"user_ids": []string{dave.ID()}}).want(t, http.StatusOK)
	entry("after dave joined", 4)
	alice.del(t, convPath(g.ID, "members", dave.ID())).want(t, http.StatusNoContent)
	entry("after dave was kicked", 3)
	bob.post(t, convPath(g.ID, "leave"), nil).want(t, http.StatusNoContent)
	entry("after bob left", 2)
}

// TestKickByAnotherProcess: a member kicked by another process sharing
// the store (here a second store on the same database, which tells this
// server nothing) gets nothing live that this server stores after the
// kick, though this server had the members cached before it: a message
// carries the version of the members it was committed with, newer than
// the cached list (PROTOCOL guarantee 4).
func TestKickByAnotherProcess(t *testing.T) {
	ts := newServer(t)
	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	g := alice.group(t, "g", bob)
	bobWS := bob.dial(t, "bob")
	before := alice.send(t, g.ID, "before", "before the kick")
	bobWS.waitLiveSeq(t, g.ID, before.Seq) // the members are cached now

	other, _ := ts.openStore(nil, nil, server.NewMetrics(), slog.New(slog.DiscardHandler))
	if err := other.KickMember(context.Background(), g.ID, alice.ID(), bob.ID()); err != nil {
		t.Fatalf("kick through the other store: %v", err)
	}
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}

	after := alice.send(t, g.ID, "after", "after the kick")
	bobWS.ping(t)
	if bobWS.hasLiveSeq(g.ID, after.Seq) {
		t.Errorf("the member kicked by another process got seq %d live, past its bound %d", after.Seq, before.Seq)
	}
	if c := bob.conversation(t, g.ID); !c.Left || c.MaxSeq != before.Seq {
		t.Errorf("bob's entry: left %v, max_seq %d; want left at %d", c.Left, c.MaxSeq, before.Seq)
	}
}
