package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"
)

// ephemeral decodes the v1.1 fields of typing, presence and hello frames.
type ephemeral struct {
	User   string   `json:"user"`
	Conv   string   `json:"conv"`
	Online *bool    `json:"online"`
	List   []string `json:"-"`
}

func decodeEphemeral(t testing.TB, f frame) ephemeral {
	t.Helper()
	var e ephemeral
	if f.Type == "hello" {
		var h struct {
			Online []string `json:"online"`
		}
		if err := json.Unmarshal(f.raw, &h); err != nil || h.Online == nil {
			t.Fatalf("hello without an online list: %s", f)
		}
		e.List = h.Online
		return e
	}
	if err := json.Unmarshal(f.raw, &e); err != nil {
		t.Fatalf("decoding %s: %v", f, err)
	}
	return e
}

func presenceOf(user string, online bool) func(frame) bool {
	return func(f frame) bool {
		if f.Type != "presence" {
			return false
		}
		var e ephemeral
		_ = json.Unmarshal(f.raw, &e)
		return e.User == user && e.Online != nil && *e.Online == online
	}
}

// TestTyping: a member's typing reaches the other online members once per
// interval; a non-member's is dropped without an error.
func TestTyping(t *testing.T) {
	ts := newServer(t)
	alice, bob, dave := ts.register(t, "alice"), ts.register(t, "bob"), ts.register(t, "dave")
	g := alice.group(t, "team", bob)
	wa, wb, wd := alice.dial(t, "alice"), bob.dial(t, "bob"), dave.dial(t, "dave")
	wa.write(t, map[string]any{"type": "typing", "conv": g.ID})
	f := wb.next(t, "typing", ofType("typing"))
	if e := decodeEphemeral(t, f); e.User != alice.ID() || e.Conv != g.ID {
		t.Fatalf("typing frame %s", f)
	}
	// Within the interval: dropped silently.
	wa.write(t, map[string]any{"type": "typing", "conv": g.ID})
	wd.write(t, map[string]any{"type": "typing", "conv": g.ID})
	wd.write(t, map[string]any{"type": "typing", "conv": "nonexistent"})
	wa.ping(t)
	wd.ping(t)
	wb.ping(t)
	if n := len(wb.received(ofType("typing"))); n != 1 {
		t.Fatalf("bob got %d typing frames, want 1:\n%s", n, wb.dump())
	}
	if n := len(wa.received(ofType("typing"))); n != 0 {
		t.Fatalf("the typist got its own typing:\n%s", wa.dump())
	}
	if n := len(wd.received(ofType("error"))); n != 0 {
		t.Fatalf("a dropped typing was answered:\n%s", wd.dump())
	}
}

// TestPresence: contacts hear when a user's first session opens and, after
// the grace, when its last one closes; a reload within the grace is not
// heard; hello lists the contacts online.
func TestPresence(t *testing.T) {
	const grace = 300 * time.Millisecond
	ts := newServer(t, func(c *testConfig) { c.server.PresenceGrace = grace })
	alice, bob, eve := ts.register(t, "alice"), ts.register(t, "bob"), ts.register(t, "eve")
	alice.direct(t, bob)
	wb := bob.dial(t, "bob")
	we := eve.dial(t, "eve") // shares no conversation with alice
	if e := decodeEphemeral(t, wb.hello); len(e.List) != 0 {
		t.Fatalf("bob's hello online = %v, want none", e.List)
	}
	wa := alice.dial(t, "alice")
	if e := decodeEphemeral(t, wa.hello); !slices.Equal(e.List, []string{bob.ID()}) {
		t.Fatalf("alice's hello online = %v, want bob", e.List)
	}
	wb.next(t, "alice online", presenceOf(alice.ID(), true))

	// A second session and a reload: nothing new is heard.
	wa2 := alice.dial(t, "alice2")
	wa.conn.CloseNow()
	wa3 := alice.dial(t, "alice3")
	wa2.conn.CloseNow()
	time.Sleep(2 * grace)
	wb.ping(t)
	if n := len(wb.received(ofType("presence"))); n != 1 {
		t.Fatalf("bob heard %d presence frames, want 1 (no flicker):\n%s", n, wb.dump())
	}
	wa3.conn.CloseNow()
	wb.next(t, "alice offline", presenceOf(alice.ID(), false))
	we.ping(t)
	if n := len(we.received(ofType("presence"))); n != 0 {
		t.Fatalf("eve, no contact of alice's, heard of her:\n%s", we.dump())
	}
}

// TestPresenceNewContacts: two people online who become contacts (a new
// direct conversation, a group, members added) hear at once that the
// other is online, without anyone reconnecting.
func TestPresenceNewContacts(t *testing.T) {
	ts := newServer(t)
	alice, bob, carol, dave := ts.register(t, "alice"), ts.register(t, "bob"), ts.register(t, "carol"), ts.register(t, "dave")
	wa, wb, wc := alice.dial(t, "alice"), bob.dial(t, "bob"), carol.dial(t, "carol")
	// Each session's opening tells its contacts (none yet) in the
	// background; one that ran late would tell the contacts made below a
	// second time.
	for _, u := range []*account{alice, bob, carol} {
		ts.waitPresenceSettled(t, u.ID())
	}

	alice.direct(t, bob)
	wa.next(t, "bob online to alice", presenceOf(bob.ID(), true))
	wb.next(t, "alice online to bob", presenceOf(alice.ID(), true))

	g := alice.group(t, "team", bob) // no news: already contacts
	alice.post(t, convPath(g.ID, "members"), map[string]any{"user_ids": []string{carol.ID(), dave.ID()}}).want(t, http.StatusOK)
	wc.next(t, "alice online to carol", presenceOf(alice.ID(), true))
	wc.next(t, "bob online to carol", presenceOf(bob.ID(), true))
	wa.next(t, "carol online to alice", presenceOf(carol.ID(), true))
	wb.next(t, "carol online to bob", presenceOf(carol.ID(), true))
	for _, w := range []*wsClient{wa, wb, wc} {
		w.ping(t)
	}
	// dave is offline: nobody hears of him.
	for _, w := range []*wsClient{wa, wb, wc} {
		if n := len(w.received(presenceOf(dave.ID(), true))); n != 0 {
			t.Fatalf("heard offline dave online:\n%s", w.dump())
		}
	}
	if n := len(wc.received(ofType("presence"))); n != 2 {
		t.Fatalf("carol heard %d presence frames, want 2:\n%s", n, wc.dump())
	}

	// People who are contacts already are not told again when they come
	// to share one more conversation: a direct of two group members, a
	// second group, members added to it.
	heard := map[*wsClient]int{}
	for _, w := range []*wsClient{wa, wb, wc} {
		heard[w] = len(w.received(ofType("presence")))
	}
	carol.direct(t, bob)
	g2 := carol.group(t, "second", alice)
	carol.post(t, convPath(g2.ID, "members"), map[string]any{"user_ids": []string{bob.ID()}}).want(t, http.StatusOK)
	for _, w := range []*wsClient{wa, wb, wc} {
		w.ping(t)
	}
	for name, w := range map[string]*wsClient{"alice": wa, "bob": wb, "carol": wc} {
		if n := len(w.received(ofType("presence"))); n != heard[w] {
			t.Errorf("%s heard %d more presence frames, want none (contacts already):\n%s", name, n-heard[w], w.dump())
		}
	}
}

// TestPresenceQuickReturn: a user who leaves and comes back just as the
// grace ends is, once things settle, online to its contacts, and they
// heard its states alternate (never "offline" after its return).
func TestPresenceQuickReturn(t *testing.T) {
	const grace = 30 * time.Millisecond
	ts := newServer(t, func(c *testConfig) { c.server.PresenceGrace = grace })
	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	alice.direct(t, bob)
	wb := bob.dial(t, "bob")
	wa := alice.dial(t, "alice")
	for i := 0; i < 15; i++ {
		wa.conn.CloseNow()
		// Back right as the offline announcement goes out.
		time.Sleep(grace + time.Duration(i%5)*time.Millisecond)
		wa = alice.dial(t, fmt.Sprintf("alice%d", i))
	}
	time.Sleep(5 * grace)
	wb.ping(t)
	var states []bool
	for _, f := range wb.received(ofType("presence")) {
		if e := decodeEphemeral(t, f); e.User == alice.ID() {
			states = append(states, *e.Online)
		}
	}
	if len(states) == 0 || !states[len(states)-1] {
		t.Fatalf("alice is online but bob last heard %v:\n%s", states, wb.dump())
	}
	for i := 1; i < len(states); i++ {
		if states[i] == states[i-1] {
			t.Fatalf("bob heard alice's presence %v: the same state twice in a row", states)
		}
	}
}

// waitPresenceSettled waits until the server has told user's contacts its
// presence as it is now.
func (ts *testServer) waitPresenceSettled(t *testing.T, user string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ts.srv.PresenceSettled(user) {
		if time.Now().After(deadline) {
			t.Fatalf("the presence of %s did not settle", user)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestPresenceAfterLeavingAndRemoval: people who were told a user is
// online hear when it goes offline, even after it left their only shared
// group or its account was removed (its direct conversations stay in
// their lists); otherwise they would show it online until they reconnect.
func TestPresenceAfterLeavingAndRemoval(t *testing.T) {
	const grace = 200 * time.Millisecond
	ts := newServer(t, func(c *testConfig) { c.server.PresenceGrace = grace })
	alice, bob, carol := ts.register(t, "alice"), ts.register(t, "bob"), ts.register(t, "carol")
	alice.direct(t, bob)
	g := alice.group(t, "team", carol)
	wb, wc := bob.dial(t, "bob"), carol.dial(t, "carol")
	wa := alice.dial(t, "alice")
	wb.next(t, "alice online", presenceOf(alice.ID(), true))
	wc.next(t, "alice online", presenceOf(alice.ID(), true))

	ts.do(t, "POST", "/api/v1/conversations/"+g.ID+"/leave", alice.Token, nil).want(t, http.StatusNoContent)
	if err := ts.svc.RemoveUser(t.Context(), "alice"); err != nil {
		t.Fatal(err)
	}
	wa.conn.CloseNow()
	wb.next(t, "removed alice offline", presenceOf(alice.ID(), false))
	wc.next(t, "alice, who left, offline", presenceOf(alice.ID(), false))
}
