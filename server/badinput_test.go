package server_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/coder/websocket"
)

func TestBadFrames(t *testing.T) {
	ts := newServer(t)
	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	d := alice.direct(t, bob)
	stored := alice.send(t, d.ID, "first", "stays intact")
	c := alice.dial(t, "alice")
	other := bob.dial(t, "bob")

	for _, tc := range []struct {
		name  string
		frame string
		req   string // echoed when it can be read
	}{
		{"truncated JSON", `{"type":"ping","req":"r1"`, ""},
		{"not JSON", `hello`, ""},
		{"empty", ``, ""},
		{"array", `[{"type":"ping"}]`, ""},
		{"string", `"ping"`, ""},
		{"number", `42`, ""},
		{"two objects", `{"type":"ping","req":"r2"}{"type":"ping"}`, "r2"},
		{"no type", `{"req":"r3"}`, "r3"},
		{"null", `null`, ""},
		{"unknown type", `{"type":"dance","req":"r4"}`, "r4"},
		{"type not a string", `{"type":5,"req":"r5"}`, "r5"},
		{"send without conv", `{"type":"send","req":"r6","client_msg_id":"x","body":"x"}`, "r6"},
		{"send without client_msg_id", `{"type":"send","req":"r7","conv":"` + d.ID + `","body":"x"}`, "r7"},
		{"send without body", `{"type":"send","req":"r8","conv":"` + d.ID + `","client_msg_id":"x"}`, "r8"},
		{"send with a number body", `{"type":"send","req":"r9","conv":"` + d.ID + `","client_msg_id":"x","body":5}`, "r9"},
		{"send with a mistyped conv", `{"type":"send","req":"r10","conv":5,"client_msg_id":"x","body":"x"}`, "r10"},
		{"send with an empty body", `{"type":"send","req":"r11","conv":"` + d.ID + `","client_msg_id":"x","body":""}`, "r11"},
		{"send with an unknown kind", `{"type":"send","req":"r12","conv":"` + d.ID + `","client_msg_id":"x","body":"x","kind":"image"}`, "r12"},
		{"send with a long client_msg_id", `{"type":"send","req":"r13","conv":"` + d.ID + `","client_msg_id":"` + strings.Repeat("x", 129) + `","body":"x"}`, "r13"},
		{"ack without seq", `{"type":"ack","req":"r14","conv":"` + d.ID + `"}`, "r14"},
		{"ack with a string seq", `{"type":"ack","req":"r15","conv":"` + d.ID + `","seq":"1"}`, "r15"},
		{"ack with a negative seq", `{"type":"ack","req":"r16","conv":"` + d.ID + `","seq":-1}`, "r16"},
		{"ack with a fractional seq", `{"type":"ack","req":"r17","conv":"` + d.ID + `","seq":1.5}`, "r17"},
		{"read without conv", `{"type":"read","req":"r18","seq":1}`, "r18"},
		{"read with a huge seq", `{"type":"read","req":"r19","conv":"` + d.ID + `","seq":1e30}`, "r19"},
		{"sync without after_seq", `{"type":"sync","req":"r20","conv":"` + d.ID + `"}`, "r20"},
		{"sync with limit 0", `{"type":"sync","req":"r21","conv":"` + d.ID + `","after_seq":0,"limit":0}`, "r21"},
		// req after a bad limit: it is still read and echoed.
		{"sync with a fractional limit", `{"type":"sync","conv":"` + d.ID + `","after_seq":0,"limit":1.5,"req":"r22"}`, "r22"},
		{"sync with a string limit", `{"type":"sync","conv":"` + d.ID + `","after_seq":0,"limit":"5","req":"r23"}`, "r23"},
		{"req not a string", `{"type":"bogus","req":7}`, ""},
	} {
		c.writeRaw(t, websocket.MessageText, []byte(tc.frame))
		f := c.next(t, "error for "+tc.name, ofType("error"))
		if f.Code != "bad_request" {
			t.Errorf("%s: got %s, want code bad_request", tc.name, f)
		}
		if f.Req != tc.req {
			t.Errorf("%s: got req %q, want %q", tc.name, f.Req, tc.req)
		}
		if f.errorMessage() == "" {
			t.Errorf("%s: error without message: %s", tc.name, f)
		}
		// The connection stays open and works.
		c.ping(t)
	}

	// Nothing was stored, and the session still sends.
	if got := alice.all(t, d.ID); len(got) != 1 || got[0] != stored {
		t.Errorf("stored messages: got %+v, want only %+v", got, stored)
	}
	if f := c.sendWS(t, d.ID, "after", "still works"); f.Type != "sent" {
		t.Errorf("send after bad frames: got %s", f)
	}
	other.waitLive(t, d.ID, 1)
}

func TestBinaryFrame(t *testing.T) {
	ts := newServer(t)
	alice := ts.register(t, "alice")
	c := alice.dial(t, "binary")
	other := alice.dial(t, "other")
	c.writeRaw(t, websocket.MessageBinary, []byte(`{"type":"ping"}`))
	if got, want := c.closeStatus(t), websocket.StatusUnsupportedData; got != want {
		t.Errorf("close status: got %v, want %v", got, want)
	}
	other.ping(t)
}

func TestFrameOverLimit(t *testing.T) {
	ts := newServer(t, func(c *testConfig) { c.server.MaxFrameBytes = 4096 })
	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	d := alice.direct(t, bob)
	big := alice.dial(t, "big")
	same := alice.dial(t, "alice-other")
	peer := bob.dial(t, "bob")

	// Just under the limit is fine.
	f := big.call(t, map[string]any{"type": "send", "conv": d.ID, "client_msg_id": "under", "body": strings.Repeat("u", 3900)})
	if f.Type != "sent" {
		t.Fatalf("frame under the limit: got %s", f)
	}
	frame := `{"type":"send","req":"big","conv":"` + d.ID + `","client_msg_id":"big","body":"` + strings.Repeat("x", 5000) + `"}`
	big.writeRaw(t, websocket.MessageText, []byte(frame))
	if got, want := big.closeStatus(t), websocket.StatusMessageTooBig; got != want {
		t.Errorf("close status: got %v, want %v", got, want)
	}
	if got := big.received(withReq("big")); len(got) != 0 {
		t.Errorf("the oversized frame was answered: %v", got)
	}

	// The other sessions, of the same user and of others, go on.
	same.ping(t)
	peer.ping(t)
	m := bob.send(t, d.ID, "after", "after the big frame")
	if got := same.waitLiveSeq(t, d.ID, m.Seq); got != m {
		t.Errorf("alice's other session: got %+v, want %+v", got, m)
	}
	if f := peer.sendWS(t, d.ID, "ws-after", "hi"); f.Type != "sent" {
		t.Errorf("bob's send: got %s", f)
	}
	if got, want := len(alice.all(t, d.ID)), 3; got != want {
		t.Errorf("%d messages stored, want %d", got, want)
	}
}

func TestBodyOverLimit(t *testing.T) {
	ts := newServer(t, func(c *testConfig) { c.chat.MaxBodyBytes = 1000 })
	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	d := alice.direct(t, bob)
	c := alice.dial(t, "alice")

	alice.send(t, d.ID, "max", strings.Repeat("a", 1000))
	alice.post(t, convPath(d.ID, "messages"), map[string]string{"client_msg_id": "over", "body": strings.Repeat("a", 1001)}).
		wantError(t, http.StatusRequestEntityTooLarge, "too_large")
	// The limit counts bytes, not characters.
	alice.post(t, convPath(d.ID, "messages"), map[string]string{"client_msg_id": "wide", "body": strings.Repeat("é", 501)}).
		wantError(t, http.StatusRequestEntityTooLarge, "too_large")

	if f := c.sendWS(t, d.ID, "ws-max", strings.Repeat("b", 1000)); f.Type != "sent" {
		t.Errorf("WS body at the limit: got %s", f)
	}
	f := c.sendWS(t, d.ID, "ws-over", strings.Repeat("b", 1001))
	if f.Type != "error" || f.Code != "too_large" {
		t.Errorf("WS body over the limit: got %s, want error too_large", f)
	}
	c.ping(t)
	if got, want := len(alice.all(t, d.ID)), 2; got != want {
		t.Errorf("%d messages stored, want %d", got, want)
	}
}

func TestBadHTTP(t *testing.T) {
	ts := newServer(t, func(c *testConfig) { c.server.MaxRequestBytes = 2048 })
	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	d := alice.direct(t, bob)
	path := convPath(d.ID, "messages")

	t.Run("request over max_request_bytes", func(t *testing.T) {
		body := `{"client_msg_id":"big","body":"` + strings.Repeat("x", 3000) + `"}`
		ts.do(t, "POST", path, alice.Token, body).wantError(t, http.StatusRequestEntityTooLarge, "too_large")
		ts.do(t, "POST", "/api/v1/auth/login", "", `{"username":"`+strings.Repeat("a", 3000)+`"}`).wantError(t, http.StatusRequestEntityTooLarge, "too_large")
	})
	t.Run("bad JSON", func(t *testing.T) {
		for _, body := range []string{``, `{`, `nope`, `[]`, `{"client_msg_id":"a","body":"b"} {}`, `{"client_msg_id":"a","body":"b"}x`, `"s"`} {
			ts.do(t, "POST", path, alice.Token, body).wantError(t, http.StatusBadRequest, "bad_request")
		}
		for _, p := range []string{"/api/v1/groups", "/api/v1/conversations/direct", convPath(d.ID, "ack"), convPath(d.ID, "read"), "/api/v1/auth/register", "/api/v1/auth/login"} {
			ts.do(t, "POST", p, alice.Token, `{"x":`).wantError(t, http.StatusBadRequest, "bad_request")
		}
	})
	t.Run("bad seq", func(t *testing.T) {
		for _, body := range []string{`{}`, `{"seq":-1}`, `{"seq":"3"}`, `{"seq":1.5}`, `{"seq":null}`} {
			ts.do(t, "POST", convPath(d.ID, "ack"), alice.Token, body).wantError(t, http.StatusBadRequest, "bad_request")
			ts.do(t, "POST", convPath(d.ID, "read"), alice.Token, body).wantError(t, http.StatusBadRequest, "bad_request")
		}
	})
	t.Run("missing or bad token", func(t *testing.T) {
		for _, p := range []struct{ method, path string }{
			{"GET", "/api/v1/me"}, {"GET", "/api/v1/users?q=a"}, {"GET", "/api/v1/sequences"}, {"GET", "/api/v1/conversations"},
			{"POST", "/api/v1/auth/logout"}, {"POST", "/api/v1/groups"}, {"GET", path}, {"POST", path}, {"GET", "/api/v1/ws"},
		} {
			ts.do(t, p.method, p.path, "", nil).wantError(t, http.StatusUnauthorized, "unauthorized")
			ts.do(t, p.method, p.path, "garbage", nil).wantError(t, http.StatusUnauthorized, "unauthorized")
			r, err := ts.doErr(p.method, p.path, "", nil, http.Header{"Authorization": {"Basic " + alice.Token}})
			if err != nil {
				t.Fatal(err)
			}
			r.wantError(t, http.StatusUnauthorized, "unauthorized")
		}
		// The query token is for the WebSocket only.
		ts.do(t, "GET", "/api/v1/me?token="+alice.Token, "", nil).wantError(t, http.StatusUnauthorized, "unauthorized")
	})
	t.Run("unknown endpoint", func(t *testing.T) {
		for _, p := range []string{"/api/v1/nope", "/api/v2/me", "/api/v1/conversations/" + d.ID + "/bogus", "/api/v1/conversations/" + d.ID + "/messages/1"} {
			ts.do(t, "GET", p, alice.Token, nil).wantError(t, http.StatusNotFound, "not_found")
		}
		// A known path with another method is not a crash either.
		r := ts.do(t, "DELETE", "/api/v1/me", alice.Token, nil)
		r.wantError(t, http.StatusMethodNotAllowed, "method_not_allowed")
		if got := r.Header.Get("Allow"); got != "GET" {
			t.Errorf("DELETE /api/v1/me: Allow %q, want GET", got)
		}
		// A path that takes two methods names both.
		r = ts.do(t, "PUT", "/api/v1/conversations/"+d.ID+"/messages", alice.Token, nil)
		r.wantError(t, http.StatusMethodNotAllowed, "method_not_allowed")
		if got := r.Header.Get("Allow"); got != "GET, POST" {
			t.Errorf("PUT .../messages: Allow %q, want \"GET, POST\"", got)
		}
	})
	t.Run("bad ids", func(t *testing.T) {
		for _, id := range []string{"%00", "'; DROP TABLE messages; --", strings.Repeat("z", 2000), "..", "%2F"} {
			r := ts.do(t, "GET", "/api/v1/conversations/"+id+"/messages", alice.Token, nil)
			if r.Status != http.StatusNotFound && r.Status != http.StatusBadRequest {
				t.Errorf("id %q: got %s, want 404 or 400", id, r)
			}
			if r.errorCode() == "" {
				t.Errorf("id %q: no JSON error: %s", id, r)
			}
		}
		alice.del(t, convPath(d.ID, "members", "nobody")).want(t, http.StatusBadRequest)
	})

	// Nothing of that stored anything or broke the server.
	m := alice.send(t, d.ID, "ok", "still fine")
	if got := alice.all(t, d.ID); len(got) != 1 || got[0] != m {
		t.Errorf("stored: got %+v, want only %+v", got, m)
	}
	ts.do(t, "GET", "/healthz", "", nil).want(t, http.StatusOK)
}

func TestRateLimit(t *testing.T) {
	ts := newServer(t, func(c *testConfig) { c.chat.SendRate, c.chat.SendBurst = 0.01, 3 })
	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	d := alice.direct(t, bob)
	for i := range 3 {
		alice.send(t, d.ID, "ok-"+strconv.Itoa(i), "within the burst")
	}

	r := alice.post(t, convPath(d.ID, "messages"), map[string]string{"client_msg_id": "over", "body": "too fast"})
	r.wantError(t, http.StatusTooManyRequests, "rate_limited")
	e, _ := r.JSON["error"].(map[string]any)
	ms, _ := e["retry_after_ms"].(float64)
	if ms <= 0 {
		t.Errorf("retry_after_ms: got %v, want > 0 (%s)", e["retry_after_ms"], r)
	}
	secs, err := strconv.Atoi(r.Header.Get("Retry-After"))
	if err != nil || secs < 1 || float64(secs)*1000 < ms {
		t.Errorf("Retry-After: got %q, want whole seconds covering %vms", r.Header.Get("Retry-After"), ms)
	}

	// Over the WebSocket too, with req echoed.
	c := alice.dial(t, "alice")
	f := c.sendWS(t, d.ID, "ws-over", "too fast")
	if f.Type != "error" || f.Code != "rate_limited" || f.RetryAfterMS <= 0 {
		t.Errorf("WS: got %s, want error rate_limited with retry_after_ms", f)
	}
	c.ping(t)

	// A retry of a stored message is still answered; other users are not
	// limited.
	r = alice.post(t, convPath(d.ID, "messages"), map[string]string{"client_msg_id": "ok-0", "body": "retry"}).want(t, http.StatusOK)
	bob.send(t, d.ID, "bob", "bob is not limited")
	if got, want := len(alice.all(t, d.ID)), 4; got != want {
		t.Errorf("%d messages stored, want %d", got, want)
	}
}

// TestRetryOverRateLimit: a retry is answered with its first result even
// when the sender's bucket is empty and the recent ids no longer hold it
// (PROTOCOL guarantee 3): only the store can tell it from a new send.
// Sends over the limit that are no retries are still refused, and store
// nothing.
func TestRetryOverRateLimit(t *testing.T) {
	ts := newServer(t, func(c *testConfig) {
		c.chat.SendRate, c.chat.SendBurst = 0.01, 4
		c.chat.DedupEntries = 1 // the recent ids keep only the last send
	})
	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	d := alice.direct(t, bob)
	first := alice.send(t, d.ID, "ok-0", "first")
	alice.send(t, d.ID, "ok-1", "second")
	alice.send(t, d.ID, "ok-2", "third")
	alice.send(t, d.ID, "ok-3", "fourth")

	// A new send over the limit is looked up, found to be none, and
	// refused as before: nothing stored, the wait in both forms.
	r := alice.post(t, convPath(d.ID, "messages"), map[string]string{"client_msg_id": "new", "body": "too fast"}).
		wantError(t, http.StatusTooManyRequests, "rate_limited")
	if e, _ := r.JSON["error"].(map[string]any); e["retry_after_ms"] == nil || r.Header.Get("Retry-After") == "" {
		t.Errorf("refused after the look-up: got %s with Retry-After %q, want retry_after_ms and the header", r, r.Header.Get("Retry-After"))
	}
	r = alice.post(t, convPath(d.ID, "messages"), map[string]string{"client_msg_id": "ok-0", "body": "retried"}).want(t, http.StatusOK)
	var reply struct {
		Message   messageJSON `json:"message"`
		Duplicate bool        `json:"duplicate"`
	}
	r.decode(t, &reply)
	if !reply.Duplicate || reply.Message.Seq != first.Seq || reply.Message.Body != "first" {
		t.Errorf("HTTP retry over the limit: got %s, want the first message (seq %d) as a duplicate", r, first.Seq)
	}

	// The same over the WebSocket: a new send refused after its look-up,
	// a retry answered.
	c := alice.dial(t, "alice")
	if f := c.sendWS(t, d.ID, "ws-new", "too fast"); f.Type != "error" || f.Code != "rate_limited" || f.RetryAfterMS <= 0 {
		t.Errorf("WS new send over the limit: got %s, want error rate_limited", f)
	}
	if f := c.sendWS(t, d.ID, "ok-1", "retried"); f.Type != "sent" || f.Duplicate == nil || !*f.Duplicate || f.message().Seq != first.Seq+1 {
		t.Errorf("WS retry over the limit: got %s, want sent duplicate of seq %d", f, first.Seq+1)
	}
	if got, want := len(alice.all(t, d.ID)), 4; got != want {
		t.Errorf("%d messages stored, want %d", got, want)
	}

	// The look-ups are bounded too: a flood over the limit gets 429
	// without reaching the store once their own bucket is empty, and the
	// session stays open.
	for i := range 20 {
		f := c.sendWS(t, d.ID, "flood-"+strconv.Itoa(i), "flood")
		if f.Type != "error" || f.Code != "rate_limited" {
			t.Fatalf("flood %d: got %s, want rate_limited", i, f)
		}
	}
	if f := c.sendWS(t, d.ID, "ok-2", "retried"); f.Type != "error" || f.Code != "rate_limited" {
		t.Errorf("retry once the look-ups are spent: got %s, want rate_limited (the client retries after retry_after_ms)", f)
	}
	c.ping(t)
	if got, want := len(alice.all(t, d.ID)), 4; got != want {
		t.Errorf("%d messages stored after the flood, want %d", got, want)
	}
}
