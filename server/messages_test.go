package server_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestSendHTTP(t *testing.T) {
	ts := newServer(t)
	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	d := alice.direct(t, bob)

	m := alice.send(t, d.ID, "c1", "hello")
	want := messageJSON{Conv: d.ID, Seq: 1, From: alice.ID(), ClientMsgID: "c1", Kind: "text", Body: "hello", TS: m.TS}
	if m != want {
		t.Errorf("got %+v, want %+v", m, want)
	}
	// Unix milliseconds: within a day of the test's clock (a unit check,
	// not a timing one).
	if now := time.Now().UnixMilli(); m.TS < now-86_400_000 || m.TS > now+86_400_000 {
		t.Errorf("ts: got %d, want Unix milliseconds near %d", m.TS, now)
	}

	// A retry answers 200 with the first message, whatever its body.
	r := alice.post(t, convPath(d.ID, "messages"), map[string]string{"client_msg_id": "c1", "body": "hello again"}).want(t, http.StatusOK)
	var dup struct {
		Message   messageJSON `json:"message"`
		Duplicate bool        `json:"duplicate"`
	}
	r.decode(t, &dup)
	if !dup.Duplicate {
		t.Errorf("retry: duplicate is false")
	}
	if got := dup.Message; got != m {
		t.Errorf("retry: got %+v, want the first message %+v", got, m)
	}

	// The same client_msg_id from another sender or in another conversation
	// is another message.
	fromBob := bob.send(t, d.ID, "c1", "bob's own c1")
	if got, want := fromBob.Seq, int64(2); got != want {
		t.Errorf("bob's c1: seq %d, want %d", got, want)
	}
	g := alice.group(t, "g", bob)
	if got := alice.send(t, g.ID, "c1", "in a group"); got.Seq != 1 || got.Conv != g.ID {
		t.Errorf("c1 in another conversation: got %+v", got)
	}
	if got, want := seqsOf(alice.all(t, d.ID)), []int64{1, 2}; !equalSeqs(got, want) {
		t.Errorf("stored: got %v, want %v", got, want)
	}

	// client_msg_id is 1-128 characters, body is required, kind is text.
	long := strings.Repeat("é", 128)
	if got := alice.send(t, d.ID, long, "long id"); got.ClientMsgID != long {
		t.Errorf("128-character client_msg_id: got %q", got.ClientMsgID)
	}
	for _, body := range []map[string]any{
		{"body": "no id"},
		{"client_msg_id": "", "body": "empty id"},
		{"client_msg_id": strings.Repeat("x", 129), "body": "id too long"},
		{"client_msg_id": "c9"},
		{"client_msg_id": "c9", "body": ""},
		{"client_msg_id": "c9", "body": 5},
		{"client_msg_id": 9, "body": "x"},
		{"client_msg_id": "c9", "body": "x", "kind": "image"},
	} {
		alice.post(t, convPath(d.ID, "messages"), body).wantError(t, http.StatusBadRequest, "bad_request")
	}
	if got, want := len(alice.all(t, d.ID)), 3; got != want {
		t.Errorf("after bad sends: %d messages stored, want %d", got, want)
	}
}

func TestSendWS(t *testing.T) {
	ts := newServer(t)
	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	d := alice.direct(t, bob)
	ws := alice.dial(t, "alice")

	f := ws.call(t, map[string]any{"type": "send", "conv": d.ID, "client_msg_id": "c1", "body": "hello", "kind": "text"})
	if f.Type != "sent" || f.Duplicate == nil || *f.Duplicate {
		t.Fatalf("got %s, want sent with duplicate false", f)
	}
	m := f.message()
	want := messageJSON{Conv: d.ID, Seq: 1, From: alice.ID(), ClientMsgID: "c1", Kind: "text", Body: "hello", TS: m.TS}
	if m != want {
		t.Errorf("got %+v, want %+v", m, want)
	}

	f = ws.sendWS(t, d.ID, "c1", "changed body")
	if f.Type != "sent" || f.Duplicate == nil || !*f.Duplicate {
		t.Fatalf("retry: got %s, want sent with duplicate true", f)
	}
	if got := f.message(); got != m {
		t.Errorf("retry: got %+v, want %+v", got, m)
	}
	// A retry over HTTP of a WebSocket send finds it too.
	r := alice.post(t, convPath(d.ID, "messages"), map[string]string{"client_msg_id": "c1", "body": "x"}).want(t, http.StatusOK)
	var dup struct {
		Message messageJSON `json:"message"`
	}
	r.decode(t, &dup)
	if dup.Message != m {
		t.Errorf("HTTP retry: got %+v, want %+v", dup.Message, m)
	}
	if got, want := seqsOf(alice.all(t, d.ID)), []int64{1}; !equalSeqs(got, want) {
		t.Errorf("stored: got %v, want %v", got, want)
	}
}

func TestDedupAfterRestart(t *testing.T) {
	ts := newServer(t)
	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	d := alice.direct(t, bob)
	m := alice.send(t, d.ID, "once", "first body")
	// The recent-ids cache is gone after a restart; the database still
	// knows the message.
	ts.restart()
	r := alice.post(t, convPath(d.ID, "messages"), map[string]string{"client_msg_id": "once", "body": "second body"}).want(t, http.StatusOK)
	var dup struct {
		Message   messageJSON `json:"message"`
		Duplicate bool        `json:"duplicate"`
	}
	r.decode(t, &dup)
	if !dup.Duplicate || dup.Message != m {
		t.Errorf("retry after restart: got %+v duplicate %v, want %+v duplicate true", dup.Message, dup.Duplicate, m)
	}
	c := alice.dial(t, "alice")
	if f := c.sendWS(t, d.ID, "once", "third body"); f.Type != "sent" || !*f.Duplicate || f.message() != m {
		t.Errorf("WS retry after restart: got %s", f)
	}
	if next := alice.send(t, d.ID, "next", "next"); next.Seq != m.Seq+1 {
		t.Errorf("seq after restart: got %d, want %d", next.Seq, m.Seq+1)
	}
}

func TestDedupConcurrentRetries(t *testing.T) {
	ts := newServer(t)
	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	g := alice.group(t, "g", bob)
	alice.send(t, g.ID, "before", "one message first")

	t.Run("HTTP", func(t *testing.T) {
		const n = 20
		type result struct {
			status int
			msg    messageJSON
			dup    bool
			err    error
		}
		results := make([]result, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				r, err := ts.doErr("POST", convPath(g.ID, "messages"), alice.Token,
					map[string]string{"client_msg_id": "retry-me", "body": fmt.Sprintf("attempt %d", i)}, nil)
				res := result{status: r.Status, err: err}
				if err == nil {
					m, _ := r.JSON["message"].(map[string]any)
					res.dup, _ = r.JSON["duplicate"].(bool)
					if m != nil {
						seq, _ := m["seq"].(float64)
						body, _ := m["body"].(string)
						res.msg = messageJSON{Seq: int64(seq), Body: body}
					}
				}
				results[i] = res
			}()
		}
		close(start)
		wg.Wait()

		created := 0
		var first messageJSON
		for i, r := range results {
			if r.err != nil {
				t.Fatalf("attempt %d: %v", i, r.err)
			}
			switch {
			case r.status == http.StatusCreated && !r.dup:
				created++
				first = r.msg
			case r.status == http.StatusOK && r.dup:
			default:
				t.Errorf("attempt %d: status %d duplicate %v", i, r.status, r.dup)
			}
		}
		if created != 1 {
			t.Fatalf("%d attempts were answered 201, want exactly 1", created)
		}
		for i, r := range results {
			if r.msg != first {
				t.Errorf("attempt %d: got %+v, want the stored %+v", i, r.msg, first)
			}
		}
		stored := 0
		for _, m := range alice.all(t, g.ID) {
			if m.ClientMsgID == "retry-me" {
				stored++
				if m.Seq != first.Seq || m.Body != first.Body {
					t.Errorf("stored %+v, answered %+v", m, first)
				}
			}
		}
		if stored != 1 {
			t.Errorf("stored %d times, want once", stored)
		}
	})

	t.Run("WebSocket", func(t *testing.T) {
		// Several sessions of the same user retry the same send, each
		// pipelining several copies.
		clients := []*wsClient{alice.dial(t, "s1"), alice.dial(t, "s2"), alice.dial(t, "s3"), alice.dial(t, "s4")}
		const copies = 5
		var wg sync.WaitGroup
		errs := make(chan error, len(clients)*copies)
		for _, c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range copies {
					if err := c.writeErr(map[string]any{"type": "send", "req": fmt.Sprintf("r%d", i), "conv": g.ID, "client_msg_id": "ws-retry", "body": c.name}); err != nil {
						errs <- err
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		var seqs []int64
		fresh := 0
		for _, c := range clients {
			for i := range copies {
				f := c.next(t, "sent", withReq(fmt.Sprintf("r%d", i)))
				if f.Type != "sent" {
					t.Fatalf("%s: got %s, want sent", c.name, f)
				}
				if !*f.Duplicate {
					fresh++
				}
				seqs = append(seqs, f.message().Seq)
			}
		}
		if fresh != 1 {
			t.Errorf("%d sends answered duplicate false, want exactly 1", fresh)
		}
		for _, s := range seqs {
			if s != seqs[0] {
				t.Errorf("seqs differ: %v", seqs)
				break
			}
		}
		stored := 0
		for _, m := range alice.all(t, g.ID) {
			if m.ClientMsgID == "ws-retry" {
				stored++
			}
		}
		if stored != 1 {
			t.Errorf("stored %d times, want once", stored)
		}
	})
}

func TestOrderingConcurrentSenders(t *testing.T) {
	ts := newServer(t)
	const senders, perSender = 4, 50
	users := ts.registerN(t, "user", senders)
	listener := ts.register(t, "listener")
	g := users[0].group(t, "busy", append(users[1:], listener)...)

	clients := make([]*wsClient, senders)
	for i, u := range users {
		clients[i] = u.dial(t, u.User.Username)
	}
	// A second session of a sender and a member who only listens.
	extra := users[0].dial(t, "user1-other")
	listen := listener.dial(t, "listener")

	sent := make([][]messageJSON, senders)
	errs := make([]error, senders)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			reqs := make([]string, perSender)
			for k := range reqs {
				reqs[k] = fmt.Sprintf("%s-%d", c.name, k)
				if err := c.writeErr(map[string]any{"type": "send", "req": reqs[k], "conv": g.ID, "client_msg_id": reqs[k], "body": reqs[k]}); err != nil {
					errs[i] = err
					return
				}
			}
			for _, req := range reqs {
				f, err := c.tryNext(withReq(req))
				if err != nil {
					errs[i] = fmt.Errorf("%s: waiting for %s: %w", c.name, req, err)
					return
				}
				if f.Type != "sent" {
					errs[i] = fmt.Errorf("%s: %s answered %s", c.name, req, f)
					return
				}
				sent[i] = append(sent[i], f.message())
			}
		}()
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}

	const total = senders * perSender
	// Seqs are 1..N without gaps; each sender's messages are stored in its
	// send order.
	bySeq := map[int64]messageJSON{}
	for i, ms := range sent {
		for k, m := range ms {
			if want := fmt.Sprintf("%s-%d", clients[i].name, k); m.ClientMsgID != want {
				t.Errorf("%s's reply %d is for %q, want %q", clients[i].name, k, m.ClientMsgID, want)
			}
			if k > 0 && m.Seq <= ms[k-1].Seq {
				t.Errorf("%s: send %d got seq %d after seq %d", clients[i].name, k, m.Seq, ms[k-1].Seq)
			}
			if prev, ok := bySeq[m.Seq]; ok {
				t.Errorf("seq %d given twice: %+v and %+v", m.Seq, prev, m)
			}
			bySeq[m.Seq] = m
		}
	}
	for s := int64(1); s <= total; s++ {
		if _, ok := bySeq[s]; !ok {
			t.Errorf("seq %d missing", s)
		}
	}
	stored := users[0].all(t, g.ID)
	if got, want := seqsOf(stored), seqRange(1, total); !equalSeqs(got, want) {
		t.Fatalf("stored seqs: got %v, want 1..%d", got, total)
	}
	for _, m := range stored {
		if want := bySeq[m.Seq]; m != want {
			t.Errorf("stored %+v, answered %+v", m, want)
		}
	}

	// Every session of every member receives every message exactly once,
	// in seq order; a sending session gets its own as sent, not msg.
	check := func(c *wsClient, want int) {
		t.Helper()
		c.waitLive(t, g.ID, want)
		c.ping(t)
		got := c.liveMessages(g.ID)
		if len(got) != want {
			t.Errorf("%s: %d live messages, want %d", c.name, len(got), want)
		}
		for k := 1; k < len(got); k++ {
			if got[k].Seq <= got[k-1].Seq {
				t.Errorf("%s: seq %d after %d", c.name, got[k].Seq, got[k-1].Seq)
				break
			}
		}
		for _, m := range got {
			if m != bySeq[m.Seq] {
				t.Errorf("%s: live %+v, stored %+v", c.name, m, bySeq[m.Seq])
				break
			}
		}
	}
	for _, c := range clients {
		check(c, total-perSender)
		for _, m := range c.liveMessages(g.ID) {
			if m.From == c.hello.userObject().ID {
				t.Errorf("%s received its own message %d live", c.name, m.Seq)
				break
			}
		}
	}
	check(extra, total)
	check(listen, total)
	if f := listen.received(ofType("resync")); len(f) > 0 {
		t.Errorf("listener got resync: %v", f)
	}
}

func TestLiveDelivery(t *testing.T) {
	ts := newServer(t)
	alice, bob, carol := ts.register(t, "alice"), ts.register(t, "bob"), ts.register(t, "carol")
	g := alice.group(t, "team", bob, carol)
	a1, a2 := alice.dial(t, "a1"), alice.dial(t, "a2")
	b1, b2 := bob.dial(t, "b1"), bob.dial(t, "b2")
	c1 := carol.dial(t, "c1")

	// Over the WebSocket: the sending session gets sent, every other
	// session of every member gets the message.
	f := a1.sendWS(t, g.ID, "ws-1", "from a1")
	if f.Type != "sent" {
		t.Fatalf("got %s, want sent", f)
	}
	m := f.message()
	for _, c := range []*wsClient{a2, b1, b2, c1} {
		if got := c.waitLive(t, g.ID, 1); got[0] != m {
			t.Errorf("%s: got %+v, want %+v", c.name, got[0], m)
		}
	}
	// Everything queued for a1 along with the others' copies has arrived
	// once a ping is answered.
	a1.ping(t)
	if got := a1.liveMessages(g.ID); len(got) != 0 {
		t.Errorf("sending session got its own message: %v", got)
	}

	// Over HTTP every session of the sender gets it too.
	h := alice.send(t, g.ID, "http-1", "from HTTP")
	for _, c := range []*wsClient{a1, a2, b1, b2, c1} {
		if got := c.waitLiveSeq(t, g.ID, h.Seq); got != h {
			t.Errorf("%s: got %+v, want %+v", c.name, got, h)
		}
	}

	// In a direct conversation, a third user's sessions get nothing.
	d := alice.direct(t, bob)
	dm := bob.send(t, d.ID, "d-1", "just us")
	for _, c := range []*wsClient{a1, a2, b1, b2} {
		if got := c.waitLive(t, d.ID, 1); got[0] != dm {
			t.Errorf("%s: got %+v, want %+v", c.name, got[0], dm)
		}
	}
	c1.ping(t)
	if got := c1.liveMessages(d.ID); len(got) != 0 {
		t.Errorf("carol got another pair's message: %v", got)
	}
}
