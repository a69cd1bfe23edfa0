package server_test

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/imserver/imserver/server"
)

// pushService is a fake push service (what FCM or Mozilla's autopush are
// to browsers): it records what it is sent and answers status.
type pushService struct {
	metrics  *server.Metrics
	srv      *httptest.Server
	status   atomic.Int32
	requests chan pushRequest
}

type pushRequest struct {
	path   string
	header http.Header
	body   []byte
}

func newPushService(t *testing.T) *pushService {
	p := &pushService{requests: make(chan pushRequest, 100)}
	p.status.Store(http.StatusCreated)
	p.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		// The answer is decided before the test hears of the request, so
		// a status the test sets after next() applies to later requests.
		status := int(p.status.Load())
		p.requests <- pushRequest{path: r.URL.Path, header: r.Header.Clone(), body: b}
		w.WriteHeader(status)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

// next waits for the next request.
func (p *pushService) next(t *testing.T, what string) pushRequest {
	t.Helper()
	select {
	case r := <-p.requests:
		return r
	case <-time.After(waitTimeout):
		t.Fatalf("%s: no push arrived", what)
		return pushRequest{}
	}
}

// none checks that nothing arrives for d.
func (p *pushService) none(t *testing.T, d time.Duration, what string) {
	t.Helper()
	select {
	case r := <-p.requests:
		t.Fatalf("%s: unexpected push to %s", what, r.path)
	case <-time.After(d):
	}
}

// browser is a push subscription's private half.
type browser struct {
	key      *ecdh.PrivateKey
	auth     []byte
	endpoint string
}

func newBrowser(t *testing.T, endpoint string) *browser {
	k, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	auth := make([]byte, 16)
	rand.Read(auth)
	return &browser{key: k, auth: auth, endpoint: endpoint}
}

func (b *browser) subscription() map[string]any {
	enc := base64.RawURLEncoding.EncodeToString
	return map[string]any{"endpoint": b.endpoint, "keys": map[string]string{"p256dh": enc(b.key.PublicKey().Bytes()), "auth": enc(b.auth)}}
}

// decrypt opens an aes128gcm Web Push message (RFC 8291 section 3, RFC
// 8188), as a browser does.
func (b *browser) decrypt(body []byte) ([]byte, error) {
	if len(body) < 21 {
		return nil, errors.New("short body")
	}
	salt, rs, idlen := body[:16], binary.BigEndian.Uint32(body[16:20]), int(body[20])
	if len(body) < 21+idlen || rs < 18 {
		return nil, errors.New("bad header")
	}
	asPublic := body[21 : 21+idlen]
	ciphertext := body[21+idlen:]
	pub, err := ecdh.P256().NewPublicKey(asPublic)
	if err != nil {
		return nil, fmt.Errorf("keyid is not the server's public key: %w", err)
	}
	secret, err := b.key.ECDH(pub)
	if err != nil {
		return nil, err
	}
	prkKey, _ := hkdf.Extract(sha256.New, secret, b.auth)
	keyInfo := "WebPush: info\x00" + string(b.key.PublicKey().Bytes()) + string(asPublic)
	ikm, _ := hkdf.Expand(sha256.New, prkKey, keyInfo, 32)
	prk, _ := hkdf.Extract(sha256.New, ikm, salt)
	cek, _ := hkdf.Expand(sha256.New, prk, "Content-Encoding: aes128gcm\x00", 16)
	nonce, _ := hkdf.Expand(sha256.New, prk, "Content-Encoding: nonce\x00", 12)
	block, err := aes.NewCipher(cek)
	if err != nil {
		return nil, err
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	if uint32(len(ciphertext)) > rs {
		return nil, errors.New("more than one record")
	}
	plain, err := gcm.Open(nil, nonce, ciphertext, nil)
	if err != nil {
		return nil, err
	}
	plain = bytes.TrimRight(plain, "\x00")
	if len(plain) == 0 || plain[len(plain)-1] != 2 {
		return nil, errors.New("no last-record delimiter")
	}
	return plain[:len(plain)-1], nil
}

type notificationJSON struct {
	Conv     string  `json:"conv"`
	FromName string  `json:"from_name"`
	Preview  *string `json:"preview"`
	Seq      int64   `json:"seq"`
}

func (b *browser) open(t *testing.T, r pushRequest) notificationJSON {
	t.Helper()
	plain, err := b.decrypt(r.body)
	if err != nil {
		t.Fatalf("decrypting the push: %v", err)
	}
	var n notificationJSON
	if err := json.Unmarshal(plain, &n); err != nil {
		t.Fatalf("push payload %q: %v", plain, err)
	}
	return n
}

const pushDelay = 300 * time.Millisecond

// pushServer starts a server that pushes through ps after pushDelay; the
// sender's metrics are in ps.metrics.
func pushServer(t *testing.T, ps *pushService, opts ...func(*testConfig)) *testServer {
	ps.metrics = server.NewMetrics()
	sender := server.NewPushSender(server.PushOptions{
		AllowPrivate: true,
		Transport:    ps.srv.Client().Transport,
		Timeout:      2 * time.Second,
		Backoff:      50 * time.Millisecond,
	}, ps.metrics, slog.New(slog.DiscardHandler))
	all := append([]func(*testConfig){func(c *testConfig) {
		c.push = sender
		c.server.PushAllowPrivate = true
		c.chat.Push.Delay = pushDelay
		c.chat.Push.Preview = true
	}}, opts...)
	return newServer(t, all...)
}

func TestPushDirectMessage(t *testing.T) {
	ps := newPushService(t)
	ts := pushServer(t, ps)
	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	conv := alice.direct(t, bob).ID

	var key struct {
		PublicKey string `json:"public_key"`
	}
	bob.get(t, "/api/v1/push/key").want(t, http.StatusOK).decode(t, &key)
	if raw, err := base64.RawURLEncoding.DecodeString(key.PublicKey); err != nil || len(raw) != 65 {
		t.Fatalf("public key %q: %v (%d bytes)", key.PublicKey, err, len(raw))
	}
	br := newBrowser(t, ps.srv.URL+"/push/bob")
	bob.post(t, "/api/v1/push/subscriptions", br.subscription()).want(t, http.StatusCreated)

	sent := alice.send(t, conv, "m1", "hello bob, lunch?")
	// Alice's own message is never pushed to her; bob's arrives.
	r := ps.next(t, "direct message")
	if r.path != "/push/bob" {
		t.Fatalf("push to %s", r.path)
	}
	n := br.open(t, r)
	if n.Conv != conv || n.FromName != "alice" || n.Seq != sent.Seq || n.Preview == nil || *n.Preview != "hello bob, lunch?" {
		t.Errorf("payload: %+v", n)
	}
	if got := r.header.Get("Content-Encoding"); got != "aes128gcm" {
		t.Errorf("Content-Encoding %q", got)
	}
	if a := r.header.Get("Authorization"); !strings.HasPrefix(a, "vapid t=") || !strings.HasSuffix(a, "k="+key.PublicKey) {
		t.Errorf("Authorization %q", a)
	}
	topic := r.header.Get("Topic")
	if topic == "" || len(topic) > 32 || r.header.Get("TTL") == "" {
		t.Errorf("Topic %q TTL %q", topic, r.header.Get("TTL"))
	}

	// Several messages within the delay collapse into one push of the
	// last, under the same topic.
	alice.send(t, conv, "m2", "one")
	alice.send(t, conv, "m3", "two")
	last := alice.send(t, conv, "m4", "three")
	r = ps.next(t, "collapsed")
	if n := br.open(t, r); n.Seq != last.Seq || *n.Preview != "three" {
		t.Errorf("collapsed push: %+v, want seq %d", n, last.Seq)
	}
	if r.header.Get("Topic") != topic {
		t.Errorf("topic changed within a conversation")
	}
	ps.none(t, 3*pushDelay, "after the collapsed push")

	// Read before the delay: nothing. The next unread message is pushed,
	// which shows the pipeline was alive all along.
	m := alice.send(t, conv, "m5", "read me")
	bob.post(t, convPath(conv, "read"), map[string]int64{"seq": m.Seq}).want(t, http.StatusNoContent)
	ps.none(t, 3*pushDelay, "after a read")
	m = alice.send(t, conv, "m6", "unread")
	if n := br.open(t, ps.next(t, "unread after read")); n.Seq != m.Seq {
		t.Errorf("push after read: seq %d, want %d", n.Seq, m.Seq)
	}

	// Muted: nothing.
	bob.post(t, convPath(conv, "mute"), nil).want(t, http.StatusNoContent)
	alice.send(t, conv, "m7", "muted")
	ps.none(t, 3*pushDelay, "muted")
	bob.post(t, convPath(conv, "unmute"), nil).want(t, http.StatusNoContent)
	m = alice.send(t, conv, "m8", "unmuted")
	if n := br.open(t, ps.next(t, "after unmute")); n.Seq != m.Seq {
		t.Errorf("push after unmute: seq %d, want %d", n.Seq, m.Seq)
	}

	// Groups are pushed only for mentions; a plain group message is not.
	carol := ts.register(t, "carol")
	g := alice.group(t, "team", bob, carol)
	alice.send(t, g.ID, "g1", "hello team")
	ps.none(t, 3*pushDelay, "group message without a mention")

	// Unsubscribed: nothing.
	ts.do(t, "DELETE", "/api/v1/push/subscriptions", bob.Token, map[string]string{"endpoint": br.endpoint}).want(t, http.StatusNoContent)
	alice.send(t, conv, "m9", "gone")
	ps.none(t, 3*pushDelay, "unsubscribed")
}

// A group message is pushed to the members it mentions. Mentions are
// resolved by the teamwork branch's send path: until it has landed the
// server answers no "mentions" and nobody is pushed; once it has, this test
// requires the push (chat/mentions_compat.go must then read them).
func TestPushGroupMention(t *testing.T) {
	ps := newPushService(t)
	ts := pushServer(t, ps)
	alice, bob, carol := ts.register(t, "alice"), ts.register(t, "bob"), ts.register(t, "carol")
	g := alice.group(t, "team", bob, carol)
	bb, cb := newBrowser(t, ps.srv.URL+"/push/bob"), newBrowser(t, ps.srv.URL+"/push/carol")
	bob.post(t, "/api/v1/push/subscriptions", bb.subscription()).want(t, http.StatusCreated)
	carol.post(t, "/api/v1/push/subscriptions", cb.subscription()).want(t, http.StatusCreated)

	var reply struct {
		Message struct {
			Seq      int64    `json:"seq"`
			Mentions []string `json:"mentions"`
		} `json:"message"`
	}
	alice.post(t, convPath(g.ID, "messages"), map[string]string{"client_msg_id": "g1", "body": "@bob can you look?"}).
		want(t, http.StatusCreated).decode(t, &reply)
	if len(reply.Message.Mentions) == 0 {
		ps.none(t, 3*pushDelay, "group message before mentions exist")
		return
	}
	r := ps.next(t, "mention")
	if r.path != "/push/bob" {
		t.Fatalf("mention pushed to %s, want bob only", r.path)
	}
	if n := bb.open(t, r); n.Seq != reply.Message.Seq || n.Conv != g.ID {
		t.Errorf("mention push: %+v", n)
	}
	ps.none(t, 3*pushDelay, "carol, not mentioned")
}

func TestPushPreviewOff(t *testing.T) {
	ps := newPushService(t)
	ts := pushServer(t, ps, func(c *testConfig) { c.chat.Push.Preview = false })
	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	conv := alice.direct(t, bob).ID
	br := newBrowser(t, ps.srv.URL+"/push/bob")
	bob.post(t, "/api/v1/push/subscriptions", br.subscription()).want(t, http.StatusCreated)
	alice.send(t, conv, "m1", "secret plans")
	r := ps.next(t, "push")
	if n := br.open(t, r); n.Preview != nil || n.FromName != "alice" {
		t.Errorf("preview off: %+v", n)
	}
}

func TestPushGoneDropsSubscription(t *testing.T) {
	ps := newPushService(t)
	ts := pushServer(t, ps)
	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	conv := alice.direct(t, bob).ID
	br := newBrowser(t, ps.srv.URL+"/push/bob")
	bob.post(t, "/api/v1/push/subscriptions", br.subscription()).want(t, http.StatusCreated)

	// 5xx is retried.
	ps.status.Store(http.StatusServiceUnavailable)
	alice.send(t, conv, "m1", "one")
	ps.next(t, "first attempt")
	ps.status.Store(http.StatusGone)
	ps.next(t, "retry")
	// 410: dropped, so the next message is not pushed to it.
	time.Sleep(100 * time.Millisecond)
	ps.status.Store(http.StatusCreated)
	alice.send(t, conv, "m2", "two")
	ps.none(t, 4*pushDelay, "after 410")
	// Subscribing again works.
	bob.post(t, "/api/v1/push/subscriptions", br.subscription()).want(t, http.StatusCreated)
	alice.send(t, conv, "m3", "three")
	ps.next(t, "resubscribed")
	for name, want := range map[string]float64{"imserver_push_retries_total": 1, "imserver_push_subscriptions_gone_total": 1} {
		if got := ps.metric(t, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	deadline := time.Now().Add(waitTimeout)
	for ps.metric(t, "imserver_push_sent_total") != 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := ps.metric(t, "imserver_push_sent_total"); got != 1 {
		t.Errorf("imserver_push_sent_total = %v, want 1", got)
	}
}

// metric is the value of one of the sender's counters.
func (p *pushService) metric(t *testing.T, name string) float64 {
	t.Helper()
	families, err := p.metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

func TestPushSubscriptionBadInput(t *testing.T) {
	ps := newPushService(t)
	ts := pushServer(t, ps)
	bob := ts.register(t, "bob")
	br := newBrowser(t, "https://push.example.com/x")
	good := br.subscription()
	keys := good["keys"].(map[string]string)
	enc := base64.RawURLEncoding.EncodeToString
	with := func(endpoint, p256dh, auth string) map[string]any {
		return map[string]any{"endpoint": endpoint, "keys": map[string]string{"p256dh": p256dh, "auth": auth}}
	}
	offCurve := append([]byte{4}, bytes.Repeat([]byte{1}, 64)...)
	for name, body := range map[string]any{
		"no endpoint":          with("", keys["p256dh"], keys["auth"]),
		"http endpoint":        with("http://push.example.com/x", keys["p256dh"], keys["auth"]),
		"not a URL":            with("::::", keys["p256dh"], keys["auth"]),
		"huge endpoint":        with("https://push.example.com/"+strings.Repeat("a", 3000), keys["p256dh"], keys["auth"]),
		"p256dh not base64":    with(br.endpoint, "!!!not base64!!!", keys["auth"]),
		"p256dh compressed":    with(br.endpoint, enc(br.key.PublicKey().Bytes()[:33]), keys["auth"]),
		"p256dh off the curve": with(br.endpoint, enc(offCurve), keys["auth"]),
		"auth too short":       with(br.endpoint, keys["p256dh"], enc(make([]byte, 8))),
		"auth not base64":      with(br.endpoint, keys["p256dh"], "@@@"),
		"keys missing":         map[string]any{"endpoint": br.endpoint},
		"not an object":        "[1,2]",
	} {
		t.Run(name, func(t *testing.T) {
			bob.post(t, "/api/v1/push/subscriptions", body).wantError(t, http.StatusBadRequest, "bad_request")
		})
	}
	// Standard base64 with padding is taken too (libraries differ).
	std := with(br.endpoint, base64.StdEncoding.EncodeToString(br.key.PublicKey().Bytes()), base64.StdEncoding.EncodeToString(br.auth))
	bob.post(t, "/api/v1/push/subscriptions", std).want(t, http.StatusCreated)
	ts.do(t, "DELETE", "/api/v1/push/subscriptions", bob.Token, map[string]string{}).wantError(t, http.StatusBadRequest, "bad_request")
}

// A user keeps its newest 20 subscriptions: a client subscribing in a
// loop cannot grow the table or the pushes of a message.
func TestPushSubscriptionsBounded(t *testing.T) {
	ps := newPushService(t)
	ts := pushServer(t, ps)
	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	conv := alice.direct(t, bob).ID
	for i := range 25 {
		bob.post(t, "/api/v1/push/subscriptions", newBrowser(t, fmt.Sprintf("%s/push/bob-%02d", ps.srv.URL, i)).subscription()).want(t, http.StatusCreated)
		time.Sleep(2 * time.Millisecond) // distinct created_at
	}
	alice.send(t, conv, "m1", "hi")
	got := map[string]bool{}
	for range 20 {
		got[ps.next(t, "push").path] = true
	}
	ps.none(t, 3*pushDelay, "past 20 subscriptions")
	for i := range 5 {
		if p := fmt.Sprintf("/push/bob-%02d", i); got[p] {
			t.Errorf("the oldest subscription %s was kept", p)
		}
	}
}

func TestPushPrivateEndpointsRefused(t *testing.T) {
	ps := newPushService(t)
	ts := pushServer(t, ps, func(c *testConfig) { c.server.PushAllowPrivate = false })
	bob := ts.register(t, "bob")
	for _, ep := range []string{ps.srv.URL + "/x", "https://localhost/x", "https://10.1.2.3/x", "https://[::1]/x", "https://192.168.0.1/x", "https://169.254.169.254/latest", "https://intranet/x"} {
		bob.post(t, "/api/v1/push/subscriptions", newBrowser(t, ep).subscription()).wantError(t, http.StatusBadRequest, "bad_request")
	}
}

// An endpoint that never answers costs one timeout, not a worker forever:
// pushes to others go on, and the hung request is abandoned.
func TestPushHangingEndpoint(t *testing.T) {
	good := newPushService(t)
	var abandoned atomic.Int32
	release := make(chan struct{})
	var once sync.Once
	hang := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Read the body: only then does the server watch the connection
		// and cancel the request's context when the client hangs up.
		_, _ = io.ReadAll(r.Body)
		select {
		case <-r.Context().Done():
			abandoned.Add(1)
		case <-release:
		}
	}))
	hang.TLS = good.srv.TLS // same test certificate: one client trusts both
	hang.StartTLS()
	t.Cleanup(func() { once.Do(func() { close(release) }); hang.Close() })

	sender := server.NewPushSender(server.PushOptions{
		AllowPrivate: true,
		Transport:    good.srv.Client().Transport,
		Timeout:      300 * time.Millisecond,
		Workers:      1,
		Attempts:     1,
	}, nil, slog.New(slog.DiscardHandler))
	ts := newServer(t, func(c *testConfig) {
		c.push = sender
		c.server.PushAllowPrivate = true
		c.chat.Push.Delay = 50 * time.Millisecond
	})
	alice, bob, carol := ts.register(t, "alice"), ts.register(t, "bob"), ts.register(t, "carol")
	hb := newBrowser(t, hang.URL+"/hang")
	bob.post(t, "/api/v1/push/subscriptions", hb.subscription()).want(t, http.StatusCreated)
	cb := newBrowser(t, good.srv.URL+"/carol")
	carol.post(t, "/api/v1/push/subscriptions", cb.subscription()).want(t, http.StatusCreated)

	alice.send(t, alice.direct(t, bob).ID, "b1", "to the hanging one")
	time.Sleep(100 * time.Millisecond) // bob's push takes the only worker first
	alice.send(t, alice.direct(t, carol).ID, "c1", "to carol")
	cb.open(t, good.next(t, "push behind a hanging endpoint"))
	deadline := time.Now().Add(waitTimeout)
	for abandoned.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if abandoned.Load() == 0 {
		t.Error("the hanging request was never given up")
	}
}

// TestPushWaitsForEachMessage: a message read within the delay says
// nothing of the next one. When the timer of the first fires, the oldest
// message still unread must itself be push.delay old before anything is
// pushed: bob reads the first in time, the second arrived a moment before
// the timer fired and he reads it within its own delay, so nothing is
// pushed; a message he leaves unread is pushed.
func TestPushWaitsForEachMessage(t *testing.T) {
	const delay = 2 * time.Second
	ps := newPushService(t)
	ts := pushServer(t, ps, func(c *testConfig) { c.chat.Push.Delay = delay })
	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	conv := alice.direct(t, bob).ID
	br := newBrowser(t, ps.srv.URL+"/push/bob")
	bob.post(t, "/api/v1/push/subscriptions", br.subscription()).want(t, http.StatusCreated)

	start := time.Now()
	first := alice.send(t, conv, "m1", "first")
	time.Sleep(delay / 2)
	second := alice.send(t, conv, "m2", "second")
	bob.post(t, convPath(conv, "read"), map[string]int64{"seq": first.Seq}).want(t, http.StatusNoContent)
	// Past the first message's delay, within the second's.
	time.Sleep(time.Until(start.Add(delay + delay/4)))
	bob.post(t, convPath(conv, "read"), map[string]int64{"seq": second.Seq}).want(t, http.StatusNoContent)
	ps.none(t, time.Until(start.Add(2*delay)), "both messages read within their delays")

	third := alice.send(t, conv, "m3", "third")
	if n := br.open(t, ps.next(t, "an unread message")); n.Seq != third.Seq {
		t.Errorf("pushed seq %d, want %d", n.Seq, third.Seq)
	}
}
