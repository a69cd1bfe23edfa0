package server_test

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

func TestPingPong(t *testing.T) {
	ts := newServer(t)
	alice := ts.register(t, "alice")
	c := alice.dial(t, "alice")

	c.write(t, map[string]any{"type": "ping", "req": "p-1"})
	if f := c.next(t, "pong", ofType("pong")); f.Req != "p-1" {
		t.Errorf("pong: got %s, want req p-1", f)
	}
	// req is any string, echoed as it is.
	for _, req := range []string{"", "x", "日本語 \" \\ ", strings.Repeat("r", 500)} {
		c.write(t, map[string]any{"type": "ping", "req": req})
		if f := c.next(t, "pong", ofType("pong")); f.Req != req {
			t.Errorf("pong: got req %q, want %q", f.Req, req)
		}
	}
	c.write(t, map[string]any{"type": "ping"})
	if f := c.next(t, "pong", ofType("pong")); f.Req != "" {
		t.Errorf("pong to a ping without req: got %s", f)
	}
}

func TestShutdownClosesSockets(t *testing.T) {
	ts := newServer(t)
	alice := ts.register(t, "alice")
	c := alice.dial(t, "alice")
	ts.stop()
	if got, want := c.closeStatus(t), websocket.StatusGoingAway; got != want {
		t.Errorf("close status at shutdown: got %v, want %v", got, want)
	}
}

func TestOrigin(t *testing.T) {
	ts := newServer(t)
	alice := ts.register(t, "alice")

	for _, origin := range []string{"http://evil.example.com", "http://127.0.0.1.evil.example.com", "null"} {
		_, res, err := ts.dialRaw(alice.Token, &websocket.DialOptions{HTTPHeader: http.Header{"Origin": {origin}}})
		if err == nil {
			t.Errorf("Origin %s: accepted", origin)
			continue
		}
		if res == nil || res.StatusCode != http.StatusForbidden {
			t.Errorf("Origin %s: got %v, want 403", origin, res)
		}
	}
	// The server's own origin, and no Origin at all (not a browser), are
	// accepted.
	for _, h := range []http.Header{{"Origin": {"http://" + ts.Host}}, nil} {
		conn, _, err := ts.dialRaw(alice.Token, &websocket.DialOptions{HTTPHeader: h})
		if err != nil {
			t.Errorf("Origin %v: %v", h, err)
			continue
		}
		conn.CloseNow()
	}

	// An allow-list adds origins.
	ts2 := newServer(t, func(c *testConfig) { c.server.AllowedOrigins = []string{"app.example.com"} })
	bob := ts2.register(t, "bob")
	conn, _, err := ts2.dialRaw(bob.Token, &websocket.DialOptions{HTTPHeader: http.Header{"Origin": {"https://app.example.com"}}})
	if err != nil {
		t.Errorf("allowed origin: %v", err)
	} else {
		conn.CloseNow()
	}
	if _, res, err := ts2.dialRaw(bob.Token, &websocket.DialOptions{HTTPHeader: http.Header{"Origin": {"https://other.example.com"}}}); err == nil || res == nil || res.StatusCode != http.StatusForbidden {
		t.Errorf("origin outside the allow-list: got %v %v, want 403", res, err)
	}
}

func TestWSAuth(t *testing.T) {
	ts := newServer(t)
	alice := ts.register(t, "alice")

	// Missing or bad token: 401 before the upgrade, as JSON.
	for _, tok := range []string{"", "not-a-token"} {
		_, res, err := ts.dialRaw(tok, nil)
		if err == nil {
			t.Fatalf("token %q: dial succeeded", tok)
		}
		if res == nil || res.StatusCode != http.StatusUnauthorized {
			t.Errorf("token %q: got %v, want 401", tok, res)
		}
	}
	r := ts.do(t, "GET", "/api/v1/ws", "", nil)
	r.wantError(t, http.StatusUnauthorized, "unauthorized")

	// The Authorization header works too.
	conn, _, err := ts.dialRaw("", &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + alice.Token}}})
	if err != nil {
		t.Fatalf("dial with the header: %v", err)
	}
	conn.CloseNow()

	// A plain GET with a valid token is not an upgrade: an error, not a
	// session.
	r, err = ts.doErr("GET", "/api/v1/ws?token="+alice.Token, "", nil, nil)
	if err == nil && r.Status < 400 {
		t.Errorf("plain GET of the WebSocket endpoint: got %s", r)
	}
}

// A session that does not read is cut (resync) or closed; the sender and
// the other members go on at full speed, and the slow one catches up with
// sync afterwards.
func TestSlowReader(t *testing.T) {
	ts := newServer(t, func(c *testConfig) {
		c.server.SessionQueue = 64
		c.server.WriteTimeout = 5 * time.Minute // cut, not time out
		c.chat.SendRate, c.chat.SendBurst = 1e6, 1e6
	})
	alice, bob, carol := ts.register(t, "alice"), ts.register(t, "bob"), ts.register(t, "carol")
	g := alice.group(t, "busy", bob, carol)
	sender := alice.dial(t, "alice")
	fast := bob.dial(t, "bob")

	// Nobody reads carol's socket until the server has cut her.
	slow := carol.dialPaused(t, "carol", nil)

	body := strings.Repeat("x", 8000)
	const chunk = 25
	total := 0
	for round := 0; ts.slowCuts(t) == 0; round++ {
		if total >= 20000 {
			t.Fatalf("no slow-reader cut after %d messages", total)
		}
		// The sender is answered and bob receives everything while carol
		// reads nothing.
		ms := sender.pipeline(t, g.ID, chunk, body)
		total += chunk
		if got, want := ms[chunk-1].Seq, int64(total); got != want {
			t.Fatalf("round %d: last seq %d, want %d", round, got, want)
		}
		fast.waitLive(t, g.ID, total)
	}
	t.Logf("carol was cut after %d messages", total)
	// Some more after the cut.
	sender.pipeline(t, g.ID, chunk, body)
	total += chunk
	got := fast.waitLive(t, g.ID, total)
	if want := seqRange(1, int64(total)); !equalSeqs(seqsOf(got), want) {
		t.Errorf("bob's live messages: got %d (%v...), want 1..%d", len(got), seqsOf(got)[:min(len(got), 10)], total)
	}
	if f := fast.received(ofType("resync")); len(f) > 0 {
		t.Errorf("bob was cut: %v", f)
	}

	// Carol reads again: she gets resync for the conversation, or her
	// session was closed. Either way a sync returns every message.
	slow.resume()
	resync, err := slow.tryNext(func(f frame) bool { return f.Type == "resync" })
	have := map[int64]int{}
	for _, m := range slow.liveMessages(g.ID) {
		have[m.Seq]++
	}
	if err == nil {
		if resync.Conv != g.ID {
			t.Errorf("resync: got %s, want conv %s", resync, g.ID)
		}
		// Live frames resume: a new message arrives live.
		m := bob.send(t, g.ID, "after-resync", "are you back?")
		if got := slow.waitLiveSeq(t, g.ID, m.Seq); got != m {
			t.Errorf("after resync: got %+v, want %+v", got, m)
		}
		total++
		have[m.Seq]++
		for after := int64(0); ; {
			f := slow.call(t, map[string]any{"type": "sync", "conv": g.ID, "after_seq": after, "limit": 1000})
			if f.Type != "messages" {
				t.Fatalf("sync: got %s", f)
			}
			for _, m := range f.Messages {
				have[m.Seq]++
			}
			if f.Completed {
				break
			}
			after = f.Messages[len(f.Messages)-1].Seq
		}
	} else {
		t.Logf("carol's session ended instead of resync: %v; %d frames, live %v", err, len(slow.received(func(frame) bool { return true })), seqsOf(slow.liveMessages(g.ID)))
		for _, m := range carol.all(t, g.ID) {
			have[m.Seq]++
		}
	}
	for s := int64(1); s <= int64(total); s++ {
		if have[s] == 0 {
			t.Errorf("carol never got seq %d", s)
		}
	}
	// What arrived live came in order, each once.
	live := slow.liveMessages(g.ID)
	for k := 1; k < len(live); k++ {
		if live[k].Seq <= live[k-1].Seq {
			t.Errorf("carol's live stream: seq %d after %d", live[k].Seq, live[k-1].Seq)
			break
		}
	}
	if got := seqsOf(carol.all(t, g.ID)); !equalSeqs(got, seqRange(1, int64(total))) {
		t.Errorf("carol's GET: %d messages, want 1..%d", len(got), total)
	}
}

// slowCuts reads imserver_slow_reader_cuts_total from /metrics.
func (ts *testServer) slowCuts(t *testing.T) float64 {
	t.Helper()
	m := ts.fetch(t, "/metrics", testMetricsToken).want(t, http.StatusOK)
	sc := bufio.NewScanner(bytes.NewReader(m.Body))
	for sc.Scan() {
		var v float64
		if n, _ := fmt.Sscanf(sc.Text(), "imserver_slow_reader_cuts_total %g", &v); n == 1 {
			return v
		}
	}
	t.Fatal("no imserver_slow_reader_cuts_total in /metrics")
	return 0
}

// TestWriteDelay: with websocket.write_delay set, a session's writer waits
// that long once woken, so the messages of consecutive commits leave
// together; nothing is lost or reordered, and nothing leaves before the
// delay (a lower bound, which a slow machine cannot break).
func TestWriteDelay(t *testing.T) {
	const delay = 300 * time.Millisecond
	ts := newServer(t, func(c *testConfig) {
		c.server.WriteDelay = delay
		c.chat.SendRate, c.chat.SendBurst = 1e6, 1e6
	})
	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	g := alice.group(t, "delayed", bob)
	sender := alice.dial(t, "alice")
	// From before bob's dial: the writer that sends hello starts its
	// delay then, and messages queued meanwhile leave with its first round.
	start := time.Now()
	recv := bob.dial(t, "bob")
	sender.pipeline(t, g.ID, 20, "hello")
	got := recv.waitLive(t, g.ID, 20)
	if since := time.Since(start); since < delay {
		t.Errorf("messages arrived %s after the sends, before the write delay of %s", since, delay)
	}
	if want := seqRange(1, 20); !equalSeqs(seqsOf(got), want) {
		t.Errorf("live messages %v, want 1..20 in order", seqsOf(got))
	}
}

// TestSendAnswersInSendOrder: answers follow the order of the sends even
// when a later send is refused at once (an empty body) while earlier ones
// are still being stored, and a retry of a stored one (answered from the
// dedup cache) waits behind them too.
func TestSendAnswersInSendOrder(t *testing.T) {
	ts := newServer(t, func(c *testConfig) { c.chat.SendRate, c.chat.SendBurst = 1e6, 1e6 })
	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	g := alice.group(t, "order", bob)
	c := alice.dial(t, "alice")
	first := c.sendWS(t, g.ID, "first", "hello")
	var reqs []string
	for i := range 30 {
		req := c.newReq()
		reqs = append(reqs, req)
		f := map[string]any{"type": "send", "req": req, "conv": g.ID, "client_msg_id": req, "body": "b"}
		switch i % 3 {
		case 1:
			f["body"] = "" // refused at once
		case 2:
			f["client_msg_id"] = "first" // a retry, answered without the writer
		}
		c.write(t, f)
	}
	for _, req := range reqs {
		c.next(t, "answer "+req, withReq(req))
	}
	var got []string
	for _, f := range c.received(func(f frame) bool { return f.Req != "" }) {
		got = append(got, f.Req)
	}
	want := append([]string{first.Req}, reqs...)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("answers in order %v, want %v", got, want)
	}
}
