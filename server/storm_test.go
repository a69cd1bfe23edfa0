package server_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/imserver/imserver/chat"
	"github.com/imserver/imserver/seq"
	"github.com/imserver/imserver/server"
)

// stormServer starts a server whose groups storm above 20 messages in 2s
// and calm down below 5, with batches every 100ms and send limits high
// enough not to matter.
func stormServer(t *testing.T, events chat.EventQueue, m *server.Metrics) *testServer {
	t.Helper()
	return newServer(t, func(c *testConfig) {
		c.chat.SendRate = 10_000
		c.chat.SendBurst = 10_000
		c.chat.Storm = chat.StormConfig{Threshold: 20, LowerMark: 5, Window: 2 * time.Second, FlushInterval: 100 * time.Millisecond}
		c.chat.Admins = []string{"root"}
		c.chat.Events = events
		if m != nil {
			c.chat.Observer = m
		}
	})
}

// stormJSON is the body of a storm frame.
type stormJSON struct {
	Conv     string `json:"conv"`
	Active   bool   `json:"active"`
	Count    int    `json:"count"`
	WindowMS int64  `json:"window_ms"`
}

func stormOf(f frame) stormJSON {
	var s stormJSON
	_ = json.Unmarshal(f.raw, &s)
	return s
}

func stormFrame(conv string, active bool) func(frame) bool {
	return func(f frame) bool { return f.Type == "storm" && f.Conv == conv && stormOf(f).Active == active }
}

// frameConv is the conversation a pushed frame is about.
func frameConv(f frame) string {
	if f.Type == "msg" {
		return f.message().Conv
	}
	return f.Conv
}

type stormsJSON struct {
	Storms []struct {
		Conv  string `json:"conv"`
		Name  string `json:"name"`
		Count int    `json:"count"`
		Since int64  `json:"since"`
	} `json:"storms"`
}

func TestStormModeBatchesOneGroupOnly(t *testing.T) {
	events := seq.NewLocalQueue(100, time.Minute)
	metrics := server.NewMetrics()
	ts := stormServer(t, events, metrics)
	root := ts.register(t, "root")
	alice, bob, carol := ts.register(t, "alice"), ts.register(t, "bob"), ts.register(t, "carol")
	busy := alice.group(t, "busy", bob, carol).ID
	calm := bob.group(t, "calm", carol).ID

	sender := alice.dial(t, "alice")  // sends: gets `sent`, never its own messages
	other := alice.dial(t, "alice-2") // alice's other session gets them all
	bobWS := bob.dial(t, "bob")       // in both groups
	carolWS := carol.dial(t, "carol") // in both groups

	const n = 100
	sent := sender.pipeline(t, busy, n, "storm")
	if got, want := seqsOf(sent), seqRange(1, n); !equalSeqs(got, want) {
		t.Fatalf("sent seqs: got %v, want %v", got, want)
	}

	start := bobWS.next(t, "storm start", stormFrame(busy, true))
	if s := stormOf(start); s.Count <= 20 || s.WindowMS != 2000 {
		t.Errorf("storm start frame: got %s, want count > 20 and window_ms 2000", start)
	}
	for _, c := range []*wsClient{sender, other, carolWS} {
		c.next(t, "storm start", stormFrame(busy, true))
	}

	// The admin API lists the storm while it lasts (the window is 2s and
	// the last message just went in); others may not look.
	var list stormsJSON
	root.get(t, "/api/v1/admin/storms").want(t, http.StatusOK).decode(t, &list)
	if len(list.Storms) != 1 || list.Storms[0].Conv != busy || list.Storms[0].Name != "busy" || list.Storms[0].Count < 5 || list.Storms[0].Since <= 0 {
		t.Errorf("admin storms during the storm: got %+v", list)
	}
	bob.get(t, "/api/v1/admin/storms").wantError(t, http.StatusForbidden, chat.EForbidden)

	// The quiet group, while the other storms: one msg frame per message.
	for i := 0; i < 5; i++ {
		m := carol.send(t, calm, ts.unique("calm"), "quiet")
		bobWS.waitLiveSeq(t, calm, m.Seq)
	}

	// The end comes once the window holds fewer than 5 messages.
	end := bobWS.next(t, "storm end", stormFrame(busy, false))
	if s := stormOf(end); s.Count >= 5 || s.WindowMS != 2000 {
		t.Errorf("storm end frame: got %s, want count < 5", end)
	}
	for _, c := range []*wsClient{sender, other, carolWS} {
		c.next(t, "storm end", stormFrame(busy, false))
	}
	root.get(t, "/api/v1/admin/storms").want(t, http.StatusOK).decode(t, &list)
	if len(list.Storms) != 0 {
		t.Errorf("admin storms after the storm: got %+v", list)
	}

	// Back to one frame per message.
	for i := 0; i < 3; i++ {
		m := alice.send(t, busy, ts.unique("after"), "after")
		bobWS.waitLiveSeq(t, busy, m.Seq)
	}
	for _, c := range []*wsClient{bobWS, carolWS, other} {
		c.ping(t)
		if got, want := seqsOf(c.liveMessages(busy)), seqRange(1, n+3); !equalSeqs(got, want) {
			t.Errorf("%s: busy messages: got %v, want each of 1..%d once, in order", c.name, got, n+3)
		}
		checkStormFrames(t, c, busy, calm)
	}
	sender.ping(t)
	if got := sender.liveMessages(busy); len(got) != 3 {
		t.Errorf("sending session got its own messages: %v, want only the 3 sent over HTTP", seqsOf(got))
	}

	if got := metricValue(t, metrics, "imserver_storms_started_total"); got != 1 {
		t.Errorf("storms started: got %v, want 1", got)
	}
	if got := metricValue(t, metrics, "imserver_storm_groups"); got != 0 {
		t.Errorf("groups in storm after the end: got %v, want 0", got)
	}
	payloads, err := events.Take(context.Background(), chat.EventsKey, 10)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, p := range payloads {
		var a chat.StormAlert
		if err := json.Unmarshal(p, &a); err != nil || a.Conv != busy {
			t.Errorf("queued event: %s (%v)", p, err)
		}
		types = append(types, a.Type)
	}
	if len(types) != 2 || types[0] != chat.AlertStormStarted || types[1] != chat.AlertStormEnded {
		t.Errorf("queued events: got %v, want [storm.started storm.ended]", types)
	}
}

// checkStormFrames checks the order of c's frames: between the start and
// the end of the storm, busy's messages come only in batch frames, at least
// one; calm never storms and never batches (its messages were sent one at a
// time).
func checkStormFrames(t *testing.T, c *wsClient, busy, calm string) {
	t.Helper()
	storming, batches, transitions := false, 0, 0
	for _, f := range c.received(func(frame) bool { return true }) {
		switch conv := frameConv(f); {
		case conv == calm && (f.Type == "storm" || f.Type == "batch"):
			t.Errorf("%s: quiet group got %s", c.name, f)
		case conv == busy && f.Type == "storm":
			if s := stormOf(f); s.Active == storming {
				t.Errorf("%s: storm frame %s repeats the state", c.name, f)
			} else {
				storming = s.Active
				transitions++
			}
		case conv == busy && f.Type == "msg" && storming:
			t.Errorf("%s: msg frame during the storm: %s", c.name, f)
		case conv == busy && f.Type == "batch" && storming:
			batches++
		}
	}
	if transitions != 2 || batches == 0 {
		t.Errorf("%s: %d storm frames and %d batch frames during the storm, want 2 and some", c.name, transitions, batches)
	}
}

// A direct conversation never storms, however busy.
func TestStormIgnoresDirect(t *testing.T) {
	ts := stormServer(t, nil, nil)
	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	conv := alice.direct(t, bob).ID
	bobWS := bob.dial(t, "bob")
	sender := alice.dial(t, "alice")
	sender.pipeline(t, conv, 40, "direct")
	bobWS.waitLive(t, conv, 40)
	bobWS.ping(t)
	if got := bobWS.received(ofType("storm")); len(got) != 0 {
		t.Errorf("storm frames for a direct conversation: %v", got)
	}
}

// hookRequest is one POST a webhook receiver got.
type hookRequest struct {
	body      []byte
	signature string
	delivery  string
}

func TestStormWebhookSigned(t *testing.T) {
	const secret = "s3cret"
	var mu sync.Mutex
	var got []hookRequest
	arrived := make(chan struct{}, 100)
	fails := 1 // the first POST fails: the batch is retried
	good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, hookRequest{body: b, signature: r.Header.Get(server.SignatureHeader), delivery: r.Header.Get("X-Imserver-Delivery")})
		fail := fails > 0
		fails--
		mu.Unlock()
		if fail {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
		arrived <- struct{}{}
	}))
	defer good.Close()
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer bad.Close()

	events := seq.NewLocalQueue(100, time.Minute)
	ts := stormServer(t, events, nil)
	metrics := server.NewMetrics()
	hooks := server.NewWebhooks(events, []server.Webhook{
		{URL: good.URL + "/hook", Events: []string{chat.AlertStormStarted}, Secret: secret},
		{URL: bad.URL, Secret: "other"},
	}, server.WebhookOptions{PollInterval: 20 * time.Millisecond, Backoff: 10 * time.Millisecond, Attempts: 2},
		metrics, slog.New(slog.NewTextHandler(io.Discard, nil)))
	hooks.Start()
	t.Cleanup(hooks.Close)

	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	busy := alice.group(t, "busy", bob).ID
	alice.dial(t, "alice").pipeline(t, busy, 30, "storm")

	select {
	case <-arrived:
	case <-time.After(waitTimeout):
		t.Fatal("the webhook got nothing")
	}
	mu.Lock()
	reqs := append([]hookRequest(nil), got...)
	mu.Unlock()
	if len(reqs) != 2 {
		t.Fatalf("webhook requests: got %d, want 2 (a failure, then the retry)", len(reqs))
	}
	if reqs[0].delivery == "" || reqs[0].delivery != reqs[1].delivery || string(reqs[0].body) != string(reqs[1].body) {
		t.Errorf("the retry should repeat the delivery: %+v", reqs)
	}
	r := reqs[1]
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(r.body)
	want := "sha256=" + hex.EncodeToString(mac.Sum(nil))
	if !strings.HasPrefix(r.signature, "sha256=") || !hmac.Equal([]byte(r.signature), []byte(want)) {
		t.Errorf("signature: got %q, want %q", r.signature, want)
	}
	var batch []chat.StormAlert
	if err := json.Unmarshal(r.body, &batch); err != nil {
		t.Fatalf("body is not a JSON array of events: %v: %s", err, r.body)
	}
	if len(batch) != 1 || batch[0].Type != chat.AlertStormStarted || batch[0].Conv != busy || batch[0].Count <= 20 {
		t.Errorf("webhook batch: got %s", r.body)
	}

	// The receiver that always fails: its events are dropped after 2 attempts.
	deadline := time.Now().Add(waitTimeout)
	for metricValue(t, metrics, "imserver_webhook_dropped_events_total") < 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := metricValue(t, metrics, "imserver_webhook_dropped_events_total"); got < 1 {
		t.Errorf("dropped webhook events: got %v, want >= 1", got)
	}
	if got := metricValue(t, metrics, "imserver_webhook_deliveries_total"); got != 1 {
		t.Errorf("webhook deliveries: got %v, want 1", got)
	}
}

// metricValue reads an unlabelled counter or gauge of m.
func metricValue(t testing.TB, m *server.Metrics, name string) float64 {
	t.Helper()
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			x := f.GetMetric()[0]
			if c := x.GetCounter(); c != nil {
				return c.GetValue()
			}
			return x.GetGauge().GetValue()
		}
	}
	return 0
}
