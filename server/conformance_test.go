package server_test

// Black-box checks of PROTOCOL.md rules that a client written against the
// contract alone relies on and that the other tests did not reach.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/coder/websocket"
)

// rawPost sends a POST whose body is exactly body ("" for none at all),
// chunked when chunked is set (no Content-Length, as streaming clients do).
func (ts *testServer) rawPost(t *testing.T, path, token, body string, chunked bool) response {
	t.Helper()
	req, err := http.NewRequest("POST", ts.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" || chunked {
		// A Body that is not http.NoBody: with ContentLength -1 the client
		// sends it chunked even when it is empty.
		req.Body = io.NopCloser(strings.NewReader(body))
		req.ContentLength = int64(len(body))
		if chunked {
			req.ContentLength = -1
			req.TransferEncoding = []string{"chunked"}
		}
	}
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := ts.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := response{Status: res.StatusCode, Header: res.Header, Body: b}
	if len(b) > 0 {
		if err := json.Unmarshal(b, &r.JSON); err != nil {
			t.Fatalf("POST %s: body is not JSON: %q", path, b)
		}
	}
	return r
}

// PROTOCOL.md: `POST /api/v1/invites` `{max_uses?, expires_in_ms?}` and
// `POST .../mute` `{until_ms?}` take only optional fields, so a client may
// send no body at all, with or without a Content-Length.
func TestOptionalBodies(t *testing.T) {
	ts := newServer(t, inviteMode())
	ann := ts.addUser(t, "ann")
	bob := ts.addUser(t, "bob")
	conv := ann.direct(t, bob).ID
	for _, chunked := range []bool{false, true} {
		r := ts.rawPost(t, "/api/v1/invites", ann.Token, "", chunked)
		r.want(t, http.StatusCreated)
		if !strings.Contains(string(r.Body), `"code"`) {
			t.Fatalf("invite without a body (chunked %v): %s", chunked, r)
		}
		ts.rawPost(t, convPath(conv, "mute"), ann.Token, "", chunked).want(t, http.StatusNoContent)
		if ann.mutedUntil(t, conv) == 0 {
			t.Fatalf("mute without a body (chunked %v): muted_until is 0", chunked)
		}
		ann.post(t, convPath(conv, "unmute"), nil).want(t, http.StatusNoContent)
	}
	// A body that is there must still be JSON.
	ts.rawPost(t, "/api/v1/invites", ann.Token, "max_uses=3", false).wantError(t, http.StatusBadRequest, "bad_request")
	ts.rawPost(t, convPath(conv, "mute"), ann.Token, "{", true).wantError(t, http.StatusBadRequest, "bad_request")
}

// PROTOCOL.md: every endpoint takes `Authorization: Bearer <token>`; the
// scheme name is case-insensitive in HTTP (RFC 9110 11.1), and clients
// and proxies send "bearer" too.
func TestBearerSchemeCase(t *testing.T) {
	ts := newServer(t)
	ann := ts.register(t, "ann")
	for _, scheme := range []string{"Bearer", "bearer", "BEARER"} {
		r, err := ts.doErr("GET", "/api/v1/me", "", nil, http.Header{"Authorization": {scheme + " " + ann.Token}})
		if err != nil {
			t.Fatal(err)
		}
		r.want(t, http.StatusOK)
	}
	for _, h := range []string{"Basic " + ann.Token, ann.Token, "Bearer"} {
		r, err := ts.doErr("GET", "/api/v1/me", "", nil, http.Header{"Authorization": {h}})
		if err != nil {
			t.Fatal(err)
		}
		r.wantError(t, http.StatusUnauthorized, "unauthorized")
	}
	// The WebSocket takes the header the same way.
	c, _, err := ts.dialRaw("", &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"bearer " + ann.Token}}})
	if err != nil {
		t.Fatalf("socket with a lower-case bearer: %v", err)
	}
	c.CloseNow()
}

// PROTOCOL.md guarantee 3: "retries get the first seq", and v1.1: a retry
// is answered with the first result "even where a fresh send would now be
// refused". A sender kicked after its send was stored (its answer lost)
// retries and must learn the seq, which lies in its visible range.
func TestRetryAfterKick(t *testing.T) {
	ts := newServer(t)
	ann := ts.register(t, "ann")
	bob := ts.register(t, "bob")
	conv := ann.group(t, "team", bob).ID
	first := bob.send(t, conv, "b-1", "sent before the kick")
	ann.del(t, convPath(conv, "members", bob.ID())).want(t, http.StatusNoContent)

	var reply struct {
		Message   messageJSON `json:"message"`
		Duplicate bool        `json:"duplicate"`
	}
	bob.post(t, convPath(conv, "messages"), map[string]string{"client_msg_id": "b-1", "body": "sent before the kick"}).
		want(t, http.StatusOK).decode(t, &reply)
	if !reply.Duplicate || reply.Message.Seq != first.Seq {
		t.Fatalf("retry after kick: got seq %d duplicate %v, want seq %d duplicate true", reply.Message.Seq, reply.Duplicate, first.Seq)
	}
	ws := bob.dial(t, "bob")
	ws.write(t, map[string]any{"type": "send", "req": "r", "conv": conv, "client_msg_id": "b-1", "body": "sent before the kick"})
	if f := ws.next(t, "retry answer", withReq("r")); f.Type != "sent" || f.message().Seq != first.Seq {
		t.Fatalf("retry after kick over the socket: got %s, want sent of seq %d", f, first.Seq)
	}
	// A fresh send is refused as before.
	bob.post(t, convPath(conv, "messages"), map[string]string{"client_msg_id": "b-2", "body": "after"}).
		wantError(t, http.StatusForbidden, "not_member")
}

// PROTOCOL.md v1.2: when the disk cannot be written, a write is answered
// 503 unavailable with Retry-After, "never internal and never a success",
// and works again without a restart once space returns. An upload's bytes
// go to the files directory: here a tmpfs too small for them.
func TestUploadOnFullDisk(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=256k"); err != nil {
		t.Skipf("cannot mount a small tmpfs (root and CAP_SYS_ADMIN are needed): %v", err)
	}
	// Registered before the server's own cleanup, so it runs after the
	// server has stopped.
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	ts := newServer(t, func(c *testConfig) { c.files.Dir = dir })
	ann := ts.register(t, "ann")
	img := ann.uploadFile(t, "pic.png", "image/png", pngImage(t, 600, 400))
	// Fill what is left, so that neither an upload nor the image's first
	// thumbnail can be written.
	filler, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	for err == nil {
		_, err = filler.Write(make([]byte, 16<<10))
	}
	filler.Close()
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling the disk: %v", err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 32<<10) // 512 KiB
	r := ann.upload(t, "big.bin", "application/octet-stream", big)
	wantUnavailable(t, "upload on a full disk", r)
	wantUnavailable(t, "first thumbnail on a full disk", ts.fetch(t, "/api/v1/files/"+img.ID+"/thumb", ann.Token))
	ts.fetch(t, "/api/v1/files/"+img.ID, ann.Token).want(t, http.StatusOK) // reads keep working
	if strings.Contains(ts.logs.String(), "request failed") {
		t.Errorf("a full disk was logged as an internal error:\n%s", ts.logs)
	}
	// Space returns: the same upload works, without a restart.
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_REMOUNT, "size=4m"); err != nil {
		t.Fatalf("remount: %v", err)
	}
	if f := ann.uploadFile(t, "big.bin", "application/octet-stream", big); f.Size != int64(len(big)) {
		t.Fatalf("upload after space returned: size %d, want %d", f.Size, len(big))
	}
	ts.fetch(t, "/api/v1/files/"+img.ID+"/thumb", ann.Token).want(t, http.StatusOK)
}

// PROTOCOL.md: every HTTP error is a 4xx/5xx with {"error":{"code",
// "message"}}, also where the WebSocket library refuses a request before
// the upgrade (a foreign Origin, a GET that is no handshake).
func TestSocketRefusalsAreJSON(t *testing.T) {
	ts := newServer(t)
	ann := ts.register(t, "ann")
	handshake := http.Header{
		"Connection": {"Upgrade"}, "Upgrade": {"websocket"},
		"Sec-Websocket-Version": {"13"}, "Sec-Websocket-Key": {"dGhlIHNhbXBsZSBub25jZQ=="},
	}
	foreign := http.Header{"Origin": {"https://evil.example"}}
	for k, v := range handshake {
		foreign[k] = v
	}
	for _, c := range []struct {
		what   string
		header http.Header
		status int
		code   string
	}{
		{"foreign Origin", foreign, http.StatusForbidden, "forbidden"},
		{"no handshake", nil, http.StatusBadRequest, "bad_request"},
		{"bad version", http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}, "Sec-Websocket-Version": {"8"}, "Sec-Websocket-Key": {"dGhlIHNhbXBsZSBub25jZQ=="}}, http.StatusBadRequest, "bad_request"},
	} {
		r, err := ts.doErr("GET", "/api/v1/ws", ann.Token, nil, c.header)
		if err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		r.wantError(t, c.status, c.code)
	}
	// The session still opens for a proper handshake.
	ann.dial(t, "ann").ping(t)
}

// PROTOCOL.md v1.1 search: "A query that cannot be parsed is bad_request,
// never 500". A NUL in q (a%00b) reached the index as is and failed there;
// it separates words like any other non-alphanumeric character.
func TestSearchNUL(t *testing.T) {
	ts := newServer(t)
	ann, bob := ts.register(t, "ann"), ts.register(t, "bob")
	d := ann.direct(t, bob)
	ann.send(t, d.ID, "1", "alpha beta")
	for _, query := range []string{"alpha\x00beta", "\x00alpha", `"alpha` + "\x00" + `beta"`} {
		wantBodies(t, fmt.Sprintf("%q", query), ann.search(t, q(query)), "alpha beta")
	}
	ann.get(t, "/api/v1/search?"+q("\x00")).wantError(t, http.StatusBadRequest, "bad_request")
}

// TestInvalidUTF8Refused: JSON must be UTF-8 (RFC 8259). Decoding would
// turn bad bytes into U+FFFD, so two different client_msg_ids could be
// taken for one and a send answered as a duplicate of another. Both are
// refused: 400 over HTTP, an error frame (with its req) on the socket,
// which stays open; nothing is stored.
func TestInvalidUTF8Refused(t *testing.T) {
	ts := newServer(t)
	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	d := alice.direct(t, bob)
	for _, id := range []string{"id-\xff", "id-\xfe"} {
		body := []byte(`{"client_msg_id":"` + id + `","body":"hi"}`)
		ts.do(t, "POST", convPath(d.ID, "messages"), alice.Token, body).wantError(t, http.StatusBadRequest, "bad_request")
	}
	w := alice.dial(t, "alice")
	w.writeRaw(t, websocket.MessageText, []byte(`{"type":"send","req":"r1","conv":"`+d.ID+`","client_msg_id":"ws-`+"\xff"+`","body":"hi"}`))
	f := w.next(t, "error frame", ofType("error"))
	if !strings.Contains(f.String(), `"req":"r1"`) || !strings.Contains(f.String(), "bad_request") {
		t.Fatalf("error frame %s", f)
	}
	w.ping(t) // still open
	if got := alice.all(t, d.ID); len(got) != 0 {
		t.Fatalf("stored %d messages from invalid UTF-8", len(got))
	}
}

// TestRetryAfterKickAndRestart: guarantee 3 ("retries get the first seq")
// holds for a kicked sender also when only the store remembers the send
// (after a restart, nothing is in the recent ids): a text and an edit are
// answered with their first result; a fresh send is still refused.
func TestRetryAfterKickAndRestart(t *testing.T) {
	ts := newServer(t)
	ann, bob := ts.register(t, "ann"), ts.register(t, "bob")
	conv := ann.group(t, "team", bob).ID
	first := bob.send(t, conv, "b-1", "sent before the kick")
	edit := bob.edit(t, conv, first.Seq, "edited before the kick")
	ann.del(t, convPath(conv, "members", bob.ID())).want(t, http.StatusNoContent)
	ts.restart()

	var reply struct {
		Message   messageJSON `json:"message"`
		Duplicate bool        `json:"duplicate"`
	}
	bob.post(t, convPath(conv, "messages"), map[string]string{"client_msg_id": "b-1", "body": "sent before the kick"}).
		want(t, http.StatusOK).decode(t, &reply)
	if !reply.Duplicate || reply.Message.Seq != first.Seq {
		t.Fatalf("text retried after kick and restart: seq %d duplicate %v, want seq %d duplicate true", reply.Message.Seq, reply.Duplicate, first.Seq)
	}
	r := bob.sendKind(t, conv, map[string]any{"client_msg_id": edit.ClientMsgID, "kind": "edit", "target": first.Seq, "body": "edited before the kick"})
	r.want(t, http.StatusOK).decode(t, &reply)
	if !reply.Duplicate || reply.Message.Seq != edit.Seq {
		t.Fatalf("edit retried after kick and restart: seq %d duplicate %v, want seq %d duplicate true", reply.Message.Seq, reply.Duplicate, edit.Seq)
	}
	bob.post(t, convPath(conv, "messages"), map[string]string{"client_msg_id": "b-2", "body": "after"}).
		wantError(t, http.StatusForbidden, "not_member")
	// Someone who never was a member learns nothing either way.
	eve := ts.register(t, "eve")
	eve.post(t, convPath(conv, "messages"), map[string]string{"client_msg_id": "b-1", "body": "x"}).
		wantError(t, http.StatusForbidden, "not_member")
	if got := len(ann.all(t, conv)); got != 2 {
		t.Fatalf("ann sees %d messages, want 2", got)
	}
}

// PROTOCOL.md, WebSocket: "A client frame may carry `req` (any string); the
// server echoes it on the reply." The empty string is a string: a client
// that sends "req":"" gets "req":"" back on every kind of reply (pong,
// messages, sent, error), where it was left out as if the frame had none.
// A frame without req still gets a reply without one.
func TestEmptyReqEchoed(t *testing.T) {
	ts := newServer(t)
	ann, bob := ts.register(t, "ann"), ts.register(t, "bob")
	d := ann.direct(t, bob)
	c := ann.dial(t, "ann")
	reqOf := func(f frame) (string, bool) {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(f.raw, &m); err != nil {
			t.Fatalf("reply %s: %v", f, err)
		}
		raw, ok := m["req"]
		var req string
		if ok {
			if err := json.Unmarshal(raw, &req); err != nil {
				t.Fatalf("reply %s: req is not a string", f)
			}
		}
		return req, ok
	}
	for _, tc := range []struct {
		frame, reply string
	}{
		{`{"type":"ping","req":""}`, "pong"},
		{`{"type":"sync","req":"","conv":"` + d.ID + `","after_seq":0}`, "messages"},
		{`{"type":"send","req":"","conv":"` + d.ID + `","client_msg_id":"e1","body":"hi"}`, "sent"},
		{`{"type":"send","req":"","conv":"` + d.ID + `","client_msg_id":"e1","body":"hi"}`, "sent"}, // duplicate
		{`{"type":"send","req":"","conv":"` + d.ID + `","client_msg_id":"e2","body":""}`, "error"},
		{`{"type":"ack","req":"","conv":"no-such-conv","seq":1}`, "error"},
		{`{"type":"dance","req":""}`, "error"},
	} {
		c.writeRaw(t, websocket.MessageText, []byte(tc.frame))
		f := c.next(t, tc.reply+" for "+tc.frame, ofType(tc.reply))
		if req, ok := reqOf(f); !ok || req != "" {
			t.Errorf("%s: reply %s does not echo \"req\":\"\"", tc.frame, f)
		}
	}
	// Without req, no req.
	c.writeRaw(t, websocket.MessageText, []byte(`{"type":"ping"}`))
	if f := c.next(t, "pong", ofType("pong")); func() bool { _, ok := reqOf(f); return ok }() {
		t.Errorf("pong to a ping without req carries one: %s", f)
	}
}

// PROTOCOL.md: "the WebSocket also accepts ?token=<token> (browsers cannot
// set headers)". A browser behind a proxy's Basic authentication sends
// Authorization: Basic with the handshake on its own; the token in the
// query was then ignored and the socket refused with 401. A Bearer header
// still takes precedence, and HTTP endpoints still want Bearer.
func TestWSTokenBesideBasicAuth(t *testing.T) {
	ts := newServer(t)
	ann := ts.register(t, "ann")
	basic := http.Header{"Authorization": {"Basic dXNlcjpwYXNz"}}
	conn, res, err := ts.dialRaw(ann.Token, &websocket.DialOptions{HTTPHeader: basic})
	if err != nil {
		status := 0
		if res != nil {
			status = res.StatusCode
		}
		t.Fatalf("?token= beside a Basic header: %v (status %d)", err, status)
	}
	conn.CloseNow()
	// A Bearer header is the credential when given: a bad one is 401.
	_, res, err = ts.dialRaw(ann.Token, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer not-a-token"}}})
	if err == nil || res == nil || res.StatusCode != http.StatusUnauthorized {
		t.Errorf("bad Bearer header beside a good ?token=: got %v, want 401", res)
	}
	r, err := ts.doErr("GET", "/api/v1/me", "", nil, basic)
	if err != nil {
		t.Fatal(err)
	}
	r.wantError(t, http.StatusUnauthorized, "unauthorized")
}
