package server_test

import (
	"net/http"
	"testing"
)

// entryOf finds conv among entries.
func entryOf(entries []conversationJSON, conv string) (conversationJSON, bool) {
	for _, c := range entries {
		if c.ID == conv {
			return c, true
		}
	}
	return conversationJSON{}, false
}

// checkChanges checks the invariants of one page of changes.
func checkChanges(t *testing.T, ch changesJSON, since int64) {
	t.Helper()
	prev := since
	for _, c := range ch.Conversations {
		if c.Version <= prev {
			t.Errorf("versions not strictly increasing after %d: %d then %d", since, prev, c.Version)
		}
		prev = c.Version
		if c.Version > ch.MaxVersion {
			t.Errorf("entry version %d above max_version %d", c.Version, ch.MaxVersion)
		}
	}
}

func TestSequencesAndChanges(t *testing.T) {
	ts := newServer(t)
	alice, bob, carol := ts.register(t, "alice"), ts.register(t, "bob"), ts.register(t, "carol")

	if got := alice.sequences(t); got != 0 {
		t.Errorf("a new user's sequences: got %d, want 0", got)
	}
	ch := alice.changes(t, 0, 0)
	if len(ch.Conversations) != 0 || !ch.Completed || ch.MaxVersion != 0 {
		t.Errorf("a new user's changes: got %+v", ch)
	}

	// Every new conversation gives the user's set a larger version.
	var convs []string
	last := int64(0)
	for _, create := range []func() conversationJSON{
		func() conversationJSON { return alice.direct(t, bob) },
		func() conversationJSON { return alice.direct(t, carol) },
		func() conversationJSON { return alice.group(t, "g1", bob) },
		func() conversationJSON { return bob.group(t, "g2", alice, carol) },
		func() conversationJSON { return carol.group(t, "g3", alice) },
	} {
		c := create()
		convs = append(convs, c.ID)
		v := alice.sequences(t)
		if v <= last {
			t.Errorf("sequences after a new conversation: got %d, want > %d", v, last)
		}
		last = v
	}

	ch = alice.changes(t, 0, 0)
	checkChanges(t, ch, 0)
	if got, want := len(ch.Conversations), len(convs); got != want || !ch.Completed {
		t.Fatalf("changes since 0: got %d entries (completed %v), want %d", got, ch.Completed, want)
	}
	if got, want := ch.MaxVersion, last; got != want {
		t.Errorf("max_version: got %d, want %d", got, want)
	}
	if got, want := ch.Conversations[len(ch.Conversations)-1].Version, ch.MaxVersion; got != want {
		t.Errorf("last entry's version %d, max_version %d", got, want)
	}
	for i, id := range convs {
		if ch.Conversations[i].ID != id {
			t.Errorf("entry %d: got %s, want %s (creation order)", i, ch.Conversations[i].ID, id)
		}
	}

	// Paging with limit: on from the last entry's version.
	var paged []string
	since := int64(0)
	for pages := 0; ; pages++ {
		if pages > len(convs) {
			t.Fatalf("paging does not end")
		}
		p := alice.changes(t, since, 2)
		checkChanges(t, p, since)
		if len(p.Conversations) > 2 {
			t.Fatalf("limit 2: got %d entries", len(p.Conversations))
		}
		for _, c := range p.Conversations {
			paged = append(paged, c.ID)
		}
		if p.Completed {
			break
		}
		since = p.Conversations[len(p.Conversations)-1].Version
	}
	if len(paged) != len(convs) {
		t.Errorf("paging: got %v, want %v", paged, convs)
	}
	if p := alice.changes(t, last, 0); len(p.Conversations) != 0 || !p.Completed || p.MaxVersion != last {
		t.Errorf("changes since the latest version: got %+v", p)
	}

	// A new message moves the entry of every member.
	v0 := alice.sequences(t)
	m := bob.send(t, convs[0], "m1", "hi alice")
	p := alice.changes(t, v0, 0)
	checkChanges(t, p, v0)
	c, ok := entryOf(p.Conversations, convs[0])
	if !ok || len(p.Conversations) != 1 {
		t.Fatalf("changes after a message: got %+v, want the direct conversation", p.Conversations)
	}
	if c.MaxSeq != 1 || c.Unread != 1 || c.LastMessage == nil || *c.LastMessage != m {
		t.Errorf("entry after a message: got %+v (last_message %+v)", c, c.LastMessage)
	}
	// Its own message is not unread, and sending moved no marker.
	if bobEntry := bob.conversation(t, convs[0]); bobEntry.Unread != 0 || bobEntry.ReadSeq != 0 || bobEntry.LastAckSeq != 0 {
		t.Errorf("the sender's own entry: unread %d read_seq %d last_ack_seq %d, want 0, 0, 0", bobEntry.Unread, bobEntry.ReadSeq, bobEntry.LastAckSeq)
	}

	// A read moves it too.
	v1 := alice.sequences(t)
	alice.post(t, convPath(convs[0], "read"), map[string]int{"seq": 1}).want(t, http.StatusNoContent)
	p = alice.changes(t, v1, 0)
	if c, ok := entryOf(p.Conversations, convs[0]); !ok || c.ReadSeq != 1 || c.Unread != 0 {
		t.Errorf("changes after a read: got %+v", p.Conversations)
	}
	// A read that moves nothing does not.
	v2 := alice.sequences(t)
	alice.post(t, convPath(convs[0], "read"), map[string]int{"seq": 1}).want(t, http.StatusNoContent)
	if got := alice.sequences(t); got != v2 {
		t.Errorf("a no-op read moved sequences from %d to %d", v2, got)
	}

	// An ack does not.
	alice.post(t, convPath(convs[0], "ack"), map[string]int{"seq": 1}).want(t, http.StatusNoContent)
	if got := alice.sequences(t); got != v2 {
		t.Errorf("an ack moved sequences from %d to %d", v2, got)
	}

	// Membership does: joining, another member joining, being kicked.
	g := convs[2] // alice's g1 with bob
	v3, vb := alice.sequences(t), bob.sequences(t)
	alice.post(t, convPath(g, "members"), map[string]any{"user_ids": []string{carol.ID()}}).want(t, http.StatusOK)
	if c, ok := entryOf(alice.changes(t, v3, 0).Conversations, g); !ok || c.MembersCount != 3 {
		t.Errorf("alice's changes after carol joined: got %+v", c)
	}
	if _, ok := entryOf(bob.changes(t, vb, 0).Conversations, g); !ok {
		t.Errorf("bob's changes after carol joined miss the group")
	}
	vc := int64(0)
	if _, ok := entryOf(carol.changes(t, vc, 0).Conversations, g); !ok {
		t.Errorf("carol's changes miss the group she joined")
	}
	vc = carol.sequences(t)
	alice.del(t, convPath(g, "members", carol.ID())).want(t, http.StatusNoContent)
	pc := carol.changes(t, vc, 0)
	if c, ok := entryOf(pc.Conversations, g); !ok || !c.Left {
		t.Errorf("carol's changes after the kick: got %+v, want the group with left", pc.Conversations)
	}
	// After the kick, new messages no longer move the kicked user's entry.
	vc = carol.sequences(t)
	alice.send(t, g, "after-kick", "carol is gone")
	if got := carol.sequences(t); got != vc {
		t.Errorf("a message after the kick moved the kicked user's sequences from %d to %d", vc, got)
	}
	if pc := carol.changes(t, vc, 0); len(pc.Conversations) != 0 {
		t.Errorf("kicked user's changes after a later message: %+v", pc.Conversations)
	}

	// Clearing history is a change of the entry.
	v4 := bob.sequences(t)
	bob.post(t, convPath(convs[0], "clear"), nil).want(t, http.StatusNoContent)
	if c, ok := entryOf(bob.changes(t, v4, 0).Conversations, convs[0]); !ok || c.MinSeq != 2 {
		t.Errorf("bob's changes after clear: got %+v", c)
	}

	for _, q := range []string{"since=-1", "since=x", "limit=0", "limit=-3", "limit=x"} {
		alice.get(t, "/api/v1/conversations?"+q).wantError(t, http.StatusBadRequest, "bad_request")
	}
}

func TestChangesLimits(t *testing.T) {
	ts := newServer(t)
	alice := ts.register(t, "alice")
	const n = 105
	for range n {
		alice.group(t, ts.unique("g"))
	}
	ch := alice.changes(t, 0, 0)
	checkChanges(t, ch, 0)
	if got, want := len(ch.Conversations), 100; got != want || ch.Completed {
		t.Errorf("default limit: got %d entries (completed %v), want %d not completed", got, ch.Completed, want)
	}
	rest := alice.changes(t, ch.Conversations[99].Version, 0)
	checkChanges(t, rest, ch.Conversations[99].Version)
	if got, want := len(rest.Conversations), n-100; got != want || !rest.Completed {
		t.Errorf("second page: got %d entries (completed %v), want %d completed", got, rest.Completed, want)
	}
	ch = alice.changes(t, 0, 5000)
	if got := len(ch.Conversations); got != n || !ch.Completed {
		t.Errorf("limit 5000: got %d entries (completed %v), want %d completed", got, ch.Completed, n)
	}
	if got, want := ch.MaxVersion, alice.sequences(t); got != want {
		t.Errorf("max_version %d, sequences %d", got, want)
	}
}

func TestUnreadCounts(t *testing.T) {
	ts := newServer(t)
	alice, bob, carol := ts.register(t, "alice"), ts.register(t, "bob"), ts.register(t, "carol")
	g := alice.group(t, "team", bob, carol)
	alice.sendN(t, g.ID, 3)
	bob.sendN(t, g.ID, 2)

	unread := func(a *account) int64 {
		t.Helper()
		c := a.conversation(t, g.ID)
		ch, _ := entryOf(a.changes(t, 0, 0).Conversations, g.ID)
		if ch.Unread != c.Unread {
			t.Errorf("%s: unread %d in changes, %d in the entry", a.User.Username, ch.Unread, c.Unread)
		}
		return c.Unread
	}
	// The text messages of others only (PROTOCOL.md v1.1), whoever sent
	// last: sending reads nothing.
	for _, tc := range []struct {
		who  *account
		want int64
	}{{alice, 2}, {bob, 3}, {carol, 5}} {
		if got := unread(tc.who); got != tc.want {
			t.Errorf("%s: unread %d, want %d", tc.who.User.Username, got, tc.want)
		}
	}
	carol.post(t, convPath(g.ID, "read"), map[string]int{"seq": 4}).want(t, http.StatusNoContent)
	if got := unread(carol); got != 1 {
		t.Errorf("carol after reading 4: unread %d, want 1", got)
	}
	// Bob's own texts (4, 5) past his marker do not count, wherever it is.
	bob.post(t, convPath(g.ID, "read"), map[string]int{"seq": 2}).want(t, http.StatusNoContent)
	if got := unread(bob); got != 1 {
		t.Errorf("bob after reading 2: unread %d, want 1", got)
	}
	bob.post(t, convPath(g.ID, "read"), map[string]int{"seq": 4}).want(t, http.StatusNoContent)
	if got := unread(bob); got != 0 {
		t.Errorf("bob after reading 4: unread %d, want 0", got)
	}
	// Acks are not reads.
	alice.post(t, convPath(g.ID, "ack"), map[string]int{"seq": 5}).want(t, http.StatusNoContent)
	if got := unread(alice); got != 2 {
		t.Errorf("alice after an ack: unread %d, want 2", got)
	}
	carol.post(t, convPath(g.ID, "clear"), nil).want(t, http.StatusNoContent)
	if got := unread(carol); got != 0 {
		t.Errorf("carol after clear: unread %d, want 0", got)
	}
}

func TestHello(t *testing.T) {
	ts := newServer(t)
	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	alice.direct(t, bob)
	alice.group(t, "g", bob)

	c1 := alice.dial(t, "one")
	c2 := alice.dial(t, "two")
	for _, c := range []*wsClient{c1, c2} {
		h := c.hello
		if got, want := h.userObject(), alice.User; got != want {
			t.Errorf("%s hello user: got %+v, want %+v", c.name, got, want)
		}
		if h.Session == "" {
			t.Errorf("%s hello without session: %s", c.name, h)
		}
		if h.Sequences == nil {
			t.Errorf("%s hello without sequences: %s", c.name, h)
		} else if got, want := h.Sequences.Conversations, alice.sequences(t); got != want {
			t.Errorf("%s hello sequences.conversations: got %d, want %d", c.name, got, want)
		}
	}
	if c1.hello.Session == c2.hello.Session {
		t.Errorf("two sessions share the id %q", c1.hello.Session)
	}
}

// A former member's pulls show the edits and deletes of messages it saw
// (their state when pulled), and its entry's last_message, unread and
// mentions follow them: such a change gives its entry a new version. A
// change past its range does not.
func TestSyncFormerMemberSeesFolds(t *testing.T) {
	ts := newServer(t)
	alice, carol := ts.register(t, "alice"), ts.register(t, "carol")
	g := alice.group(t, "g", carol).ID
	first := alice.send(t, g, "1", "first before the kick")
	last := alice.send(t, g, "2", "last before the kick")
	alice.del(t, convPath(g, "members", carol.ID())).want(t, http.StatusNoContent)
	after := alice.send(t, g, "3", "after the kick")

	v := carol.sequences(t)
	alice.edit(t, g, after.Seq, "after the kick, edited")
	if got := carol.sequences(t); got != v {
		t.Errorf("an edit past the kick moved the kicked user's sequences from %d to %d", v, got)
	}
	alice.edit(t, g, last.Seq, "last before the kick, edited")
	c, ok := entryOf(carol.changes(t, v, 0).Conversations, g)
	if !ok || c.LastMessage == nil || c.LastMessage.Body != "last before the kick, edited" || !c.Left {
		t.Fatalf("kicked user's changes after an edit it sees: %+v (found %v)", c, ok)
	}
	v = carol.sequences(t)
	alice.remove(t, g, last.Seq)
	c, ok = entryOf(carol.changes(t, v, 0).Conversations, g)
	if !ok || c.LastMessage == nil || c.LastMessage.Seq != first.Seq {
		t.Fatalf("kicked user's changes after a delete it sees: %+v (found %v)", c, ok)
	}
}
