package server_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"testing"

	"github.com/imserver/imserver/chat"
	"github.com/imserver/imserver/server"
)

// ackOf returns user's last_ack_seq as the members list shows it.
func ackOf(t *testing.T, viewer *account, conv, user string) int64 {
	t.Helper()
	for _, m := range viewer.members(t, conv) {
		if m.UserID == user {
			return m.LastAckSeq
		}
	}
	t.Fatalf("%s is not a member", user)
	return 0
}

func TestAcks(t *testing.T) {
	ts := newServer(t)
	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	g := alice.group(t, "team", bob)
	alice.sendN(t, g.ID, 5)
	ws := bob.dial(t, "bob")

	check := func(want int64) {
		t.Helper()
		if got := bob.conversation(t, g.ID).LastAckSeq; got != want {
			t.Errorf("bob's entry: last_ack_seq %d, want %d", got, want)
		}
		if got := ackOf(t, alice, g.ID, bob.ID()); got != want {
			t.Errorf("members list: bob's last_ack_seq %d, want %d", got, want)
		}
	}
	check(0)

	// Acks over the WebSocket have no reply; a ping after one is answered
	// after it was handled.
	ws.write(t, map[string]any{"type": "ack", "conv": g.ID, "seq": 3})
	ws.ping(t)
	check(3)

	// Cumulative: a smaller value is a no-op.
	ws.write(t, map[string]any{"type": "ack", "conv": g.ID, "seq": 2})
	ws.ping(t)
	check(3)
	bob.post(t, convPath(g.ID, "ack"), map[string]int{"seq": 1}).want(t, http.StatusNoContent)
	check(3)

	bob.post(t, convPath(g.ID, "ack"), map[string]int{"seq": 4}).want(t, http.StatusNoContent)
	check(4)

	// Larger than max_seq is clamped.
	ws.write(t, map[string]any{"type": "ack", "conv": g.ID, "seq": 1000})
	ws.ping(t)
	check(5)

	// Acks are stored: a restart (which flushes them) keeps them, and they
	// still never move back.
	ts.restart()
	check(5)
	bob.post(t, convPath(g.ID, "ack"), map[string]int{"seq": 2}).want(t, http.StatusNoContent)
	check(5)
	// Messages sent after the ack do not move it.
	alice.send(t, g.ID, "later", "later")
	check(5)
}

func TestAcksDoNotChangeVersion(t *testing.T) {
	ts := newServer(t)
	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	d := alice.direct(t, bob)
	alice.sendN(t, d.ID, 3)
	before := bob.sequences(t)
	entry := bob.conversation(t, d.ID)

	bob.post(t, convPath(d.ID, "ack"), map[string]int{"seq": 3}).want(t, http.StatusNoContent)
	// The restart flushes the acks to the database.
	ts.restart()
	if got := bob.sequences(t); got != before {
		t.Errorf("sequences after an ack: got %d, want %d", got, before)
	}
	after := bob.conversation(t, d.ID)
	if got, want := after.Version, entry.Version; got != want {
		t.Errorf("version after an ack: got %d, want %d", got, want)
	}
	if got, want := after.LastAckSeq, int64(3); got != want {
		t.Errorf("last_ack_seq: got %d, want %d", got, want)
	}
	if ch := bob.changes(t, before, 0); len(ch.Conversations) != 0 {
		t.Errorf("changes since %d after an ack: got %+v, want none", before, ch.Conversations)
	}
}

func TestReadDirect(t *testing.T) {
	ts := newServer(t)
	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	d := alice.direct(t, bob)
	bob.sendN(t, d.ID, 3)
	a1, a2 := alice.dial(t, "a1"), alice.dial(t, "a2")
	b1 := bob.dial(t, "b1")

	// A read over the WebSocket: alice's other session gets read, bob gets
	// a receipt.
	a1.write(t, map[string]any{"type": "read", "conv": d.ID, "seq": 2})
	f := a2.next(t, "read", ofType("read"))
	if f.Conv != d.ID || f.Seq != 2 {
		t.Errorf("read frame: got %s, want conv %s seq 2", f, d.ID)
	}
	f = b1.next(t, "receipt", ofType("receipt"))
	if f.Conv != d.ID || f.Seq != 2 || f.userID() != alice.ID() {
		t.Errorf("receipt: got %s, want conv %s user %s seq 2", f, d.ID, alice.ID())
	}
	a1.ping(t)
	if got := a1.received(ofType("read")); len(got) != 0 {
		t.Errorf("the reading session got its own read: %v", got)
	}
	c := alice.conversation(t, d.ID)
	if c.ReadSeq != 2 || c.Unread != 1 {
		t.Errorf("alice's entry: read_seq %d unread %d, want 2 and 1", c.ReadSeq, c.Unread)
	}
	if got := ackOf(t, bob, d.ID, alice.ID()); got > 3 {
		t.Errorf("last_ack_seq %d beyond max_seq", got)
	}
	for _, m := range bob.members(t, d.ID) {
		if m.UserID == alice.ID() && m.ReadSeq != 2 {
			t.Errorf("members list: alice's read_seq %d, want 2", m.ReadSeq)
		}
	}

	// A smaller value is a no-op.
	alice.post(t, convPath(d.ID, "read"), map[string]int{"seq": 1}).want(t, http.StatusNoContent)
	if got := alice.conversation(t, d.ID).ReadSeq; got != 2 {
		t.Errorf("read_seq after a smaller read: got %d, want 2", got)
	}

	// Over HTTP every session gets read; larger than max_seq is clamped.
	alice.post(t, convPath(d.ID, "read"), map[string]int{"seq": 1000}).want(t, http.StatusNoContent)
	for _, c := range []*wsClient{a1, a2} {
		f := c.next(t, "read", func(f frame) bool { return f.Type == "read" && f.Seq == 3 })
		if f.Conv != d.ID {
			t.Errorf("%s: got %s", c.name, f)
		}
	}
	f = b1.next(t, "receipt 3", func(f frame) bool { return f.Type == "receipt" && f.Seq == 3 })
	if f.userID() != alice.ID() {
		t.Errorf("receipt: got %s", f)
	}
	c = alice.conversation(t, d.ID)
	if c.ReadSeq != 3 || c.Unread != 0 {
		t.Errorf("alice's entry: read_seq %d unread %d, want 3 and 0", c.ReadSeq, c.Unread)
	}
	// No read or receipt for the no-op.
	a1.ping(t)
	a2.ping(t)
	b1.ping(t)
	for _, c := range []*wsClient{a1, a2} {
		for _, f := range c.received(ofType("read")) {
			if f.Seq == 1 {
				t.Errorf("%s: read frame for a no-op: %s", c.name, f)
			}
		}
	}
	if got := len(b1.received(ofType("receipt"))); got != 2 {
		t.Errorf("bob got %d receipts, want 2", got)
	}
}

func TestReadGroupReceipts(t *testing.T) {
	ts := newServer(t)
	alice, bob, carol := ts.register(t, "alice"), ts.register(t, "bob"), ts.register(t, "carol")
	g := alice.group(t, "team", bob, carol)
	alice.sendN(t, g.ID, 3)
	a := alice.dial(t, "alice")
	b2 := bob.dial(t, "bob-other")

	bob.post(t, convPath(g.ID, "read"), map[string]int{"seq": 2}).want(t, http.StatusNoContent)
	cw := carol.dial(t, "carol")
	cw.write(t, map[string]any{"type": "read", "conv": g.ID, "seq": 3})
	if f := b2.next(t, "read", ofType("read")); f.Seq != 2 || f.Conv != g.ID {
		t.Errorf("bob's session: got %s, want read seq 2", f)
	}

	// Alice learns of both reads through coalesced receipts, each frame
	// listing the reads of its interval.
	reads := map[string]int64{}
	for reads[bob.ID()] != 2 || reads[carol.ID()] != 3 {
		f := a.next(t, "receipts of bob and carol", ofType("receipt"))
		if f.Conv != g.ID {
			t.Fatalf("receipt for another conversation: %s", f)
		}
		if len(f.Reads) == 0 {
			t.Fatalf("group receipt without reads: %s", f)
		}
		found := false
		for _, r := range f.Reads {
			reads[r.User] = r.Seq
			if r.User == f.userID() && r.Seq == f.Seq {
				found = true
			}
		}
		if !found {
			t.Errorf("receipt's user and seq are not among its reads: %s", f)
		}
	}
	if got, want := len(reads), 2; got != want {
		t.Errorf("receipts name %v, want bob and carol only", reads)
	}
	for _, m := range alice.members(t, g.ID) {
		// Alice only sent: a send moves no read marker.
		want := map[string]int64{alice.ID(): 0, bob.ID(): 2, carol.ID(): 3}[m.UserID]
		if m.ReadSeq != want {
			t.Errorf("members list: %s read_seq %d, want %d", m.UserID, m.ReadSeq, want)
		}
	}
}

// A receipt is about another member: nobody is told of its own read.
func TestGroupReceiptsNameOthers(t *testing.T) {
	ts := newServer(t)
	alice, bob, carol, dave := ts.register(t, "alice"), ts.register(t, "bob"), ts.register(t, "carol"), ts.register(t, "dave")
	g := alice.group(t, "team", bob, carol)
	alice.sendN(t, g.ID, 3)
	// Dave joins last, so receipts reach him after everyone else.
	alice.post(t, convPath(g.ID, "members"), map[string]any{"user_ids": []string{dave.ID()}}).want(t, http.StatusOK)
	alice.sendN(t, g.ID, 2)
	a, b, c, d := alice.dial(t, "alice"), bob.dial(t, "bob"), carol.dial(t, "carol"), dave.dial(t, "dave")

	// Bob reads alone.
	bob.post(t, convPath(g.ID, "read"), map[string]int{"seq": 2}).want(t, http.StatusNoContent)
	for _, w := range []*wsClient{a, c, d} {
		f := w.next(t, "bob's receipt", ofType("receipt"))
		if f.userID() != bob.ID() || f.Seq != 2 {
			t.Errorf("%s: got %s, want bob's receipt for 2", w.name, f)
		}
	}
	b.ping(t)
	for _, f := range b.received(ofType("receipt")) {
		t.Errorf("bob was told of his own read: %s", f)
	}

	// Carol and dave read; whatever the intervals, nobody hears of itself.
	c.write(t, map[string]any{"type": "read", "conv": g.ID, "seq": 4})
	d.write(t, map[string]any{"type": "read", "conv": g.ID, "seq": 5})
	reads := map[string]int64{}
	for reads[carol.ID()] != 4 || reads[dave.ID()] != 5 {
		f := a.next(t, "receipts of carol and dave", ofType("receipt"))
		for _, r := range f.Reads {
			reads[r.User] = r.Seq
		}
	}
	for _, w := range []*wsClient{a, b, c, d} {
		w.ping(t)
		self := w.hello.userObject().ID
		for _, f := range w.received(ofType("receipt")) {
			if f.userID() == self {
				t.Errorf("%s: receipt names itself: %s", w.name, f)
			}
			found := false
			for _, r := range f.Reads {
				found = found || (r.User == f.userID() && r.Seq == f.Seq)
			}
			if !found {
				t.Errorf("%s: receipt's user and seq are not among its reads: %s", w.name, f)
			}
		}
	}
}

// TestAckOfAnotherProcessCommit: an ack of messages another process
// committed (this one never saw them) is stored as sent, not clamped to
// the largest seq this process knows; past what is committed it is still
// clamped.
func TestAckOfAnotherProcessCommit(t *testing.T) {
	ts := newServer(t)
	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	g := alice.group(t, "team", bob)
	alice.sendN(t, g.ID, 2)
	bob.post(t, convPath(g.ID, "ack"), map[string]int{"seq": 2}).want(t, http.StatusNoContent)

	other, _ := ts.openStore(nil, nil, server.NewMetrics(), slog.New(slog.DiscardHandler))
	var last int64
	for i := range 5 {
		m, _, err := other.Append(context.Background(), chat.Message{Conv: g.ID, From: alice.ID(), ClientMsgID: fmt.Sprint("other-", i), Kind: chat.KindText, Body: "from the other process"})()
		if err != nil {
			t.Fatalf("append through the other store: %v", err)
		}
		last = m.Seq
	}
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}

	bob.post(t, convPath(g.ID, "ack"), map[string]int64{"seq": last - 1}).want(t, http.StatusNoContent)
	if got := bob.conversation(t, g.ID).LastAckSeq; got != last-1 {
		t.Errorf("last_ack_seq %d after an ack of %d (committed by another process), want %d", got, last-1, last-1)
	}
	bob.post(t, convPath(g.ID, "ack"), map[string]int64{"seq": last + 100}).want(t, http.StatusNoContent)
	if got := bob.conversation(t, g.ID).LastAckSeq; got != last {
		t.Errorf("last_ack_seq %d after an ack past max_seq %d, want it clamped to %d", got, last, last)
	}
}

// TestFormerMemberReadSendsNoReceipt: a member kicked from a group may
// still mark what it saw as read, but the members hear nothing of it: a
// receipt is a member's read.
func TestFormerMemberReadSendsNoReceipt(t *testing.T) {
	ts := newServer(t)
	alice, bob, carol := ts.register(t, "alice"), ts.register(t, "bob"), ts.register(t, "carol")
	g := alice.group(t, "team", bob, carol)
	alice.sendN(t, g.ID, 3)
	alice.del(t, convPath(g.ID, "members", bob.ID())).want(t, http.StatusNoContent)
	a := alice.dial(t, "alice")

	bob.post(t, convPath(g.ID, "read"), map[string]int{"seq": 3}).want(t, http.StatusNoContent)
	if c := bob.conversation(t, g.ID); c.ReadSeq != 3 {
		t.Errorf("the former member's read_seq %d, want 3", c.ReadSeq)
	}
	// Carol's read comes after bob's: once her receipt is here, one of
	// bob's would be too.
	carol.post(t, convPath(g.ID, "read"), map[string]int{"seq": 2}).want(t, http.StatusNoContent)
	for seen := false; !seen; {
		f := a.next(t, "carol's receipt", ofType("receipt"))
		for _, r := range f.Reads {
			seen = seen || r.User == carol.ID()
		}
	}
	for _, f := range a.received(ofType("receipt")) {
		if f.userID() == bob.ID() {
			t.Errorf("a receipt of the former member: %s", f)
		}
		for _, r := range f.Reads {
			if r.User == bob.ID() {
				t.Errorf("a receipt lists the former member's read: %s", f)
			}
		}
	}
}
