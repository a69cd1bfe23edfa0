package server_test

// The harness starts the real server in process, wired as main.go's serve
// wires it, on a free port with a database file under t.TempDir(), and
// drives it over real HTTP and WebSocket connections.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/imserver/imserver/chat"
	"github.com/imserver/imserver/server"
	"github.com/imserver/imserver/storage"
)

// waitTimeout bounds every wait so that a broken server fails a test instead
// of hanging it. Nothing is asserted about how long anything takes.
const waitTimeout = 30 * time.Second

// testMetricsToken is the metrics token of the servers tests start.
const testMetricsToken = "metrics-token-of-the-tests"

// testConfig is what a test may change in the server it starts.
type testConfig struct {
	chat    chat.Config
	server  server.Config
	storage storage.Options
	// push, when set, sends the server's Web Push notifications.
	push  *server.PushSender
	files server.FilesOptions
}

// testServer is one running server and what is needed to restart it on the
// same database file.
type testServer struct {
	t    *testing.T
	cfg  testConfig
	path string

	URL  string // http://127.0.0.1:port
	Host string // 127.0.0.1:port
	svc  *chat.Service
	db   *storage.DB // for tests that make its writes fail
	// storeName is the store's key in /healthz's checks.
	storeName string
	metrics   *server.Metrics
	files     *server.Files
	srv       *server.Server
	// filesDir is where a server on PostgreSQL keeps uploads.
	filesDir string

	http *http.Client
	logs *syncBuffer
	stop func()
	n    atomic.Int64 // unique suffixes for names and ids
}

// newServer starts a server with small ack and receipt intervals; opts
// change the configuration before it starts. It is shut down when the test
// ends, in the order main.go uses.
func newServer(t *testing.T, opts ...func(*testConfig)) *testServer {
	t.Helper()
	cfg := testConfig{chat: chat.Config{
		RegistrationOpen: true,
		AckFlushInterval: 50 * time.Millisecond,
		ReceiptInterval:  50 * time.Millisecond,
	}}
	cfg.server.MetricsToken = testMetricsToken
	for _, o := range opts {
		o(&cfg)
	}
	ts := &testServer{
		t:    t,
		cfg:  cfg,
		path: testDBPath(t),
		http: &http.Client{Timeout: waitTimeout, Transport: &http.Transport{}},
		logs: &syncBuffer{},
	}
	ts.start()
	t.Cleanup(func() {
		ts.stop()
		ts.http.CloseIdleConnections()
		if t.Failed() {
			t.Logf("server log:\n%s", ts.logs.String())
		}
	})
	return ts
}

func (ts *testServer) start() {
	t := ts.t
	t.Helper()
	log := slog.New(slog.NewTextHandler(ts.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	metrics := server.NewMetrics()
	hub := server.NewHub(log, metrics)
	ctx := context.Background()
	var svc *chat.Service
	db, dbName := ts.openStore(func(m []chat.Message) { svc.Committed(m) }, func(m []chat.Message, answer func()) { svc.CommittedThen(m, answer) }, metrics, log)
	ccfg, scfg := ts.cfg.chat, ts.cfg.server
	if ts.cfg.push != nil {
		ccfg.Push.Sender, scfg.Push = ts.cfg.push, ts.cfg.push
	}
	svc = chat.NewService(db, hub, ccfg, log)
	if ts.cfg.push != nil {
		if err := ts.cfg.push.Start(ctx, svc); err != nil {
			t.Fatalf("push sender: %v", err)
		}
	}
	// Files, on either store, as in main.go.
	var files *server.Files
	if fdb, ok := db.(server.FileDB); ok {
		fopts := ts.cfg.files
		if fopts.Dir == "" && testPG != nil {
			// No file beside which to put it: one directory per server,
			// kept across its restarts.
			if ts.filesDir == "" {
				ts.filesDir = t.TempDir()
			}
			fopts.Dir = ts.filesDir
		} else if fopts.Dir == "" {
			fopts.Dir = ts.path + "-files"
		}
		var err error
		files, err = server.OpenFiles(ctx, fdb, fopts, metrics, log)
		if err != nil {
			svc.Close()
			db.Close()
			t.Fatalf("files: %v", err)
		}
	}
	scfg.Files = files
	srv := server.New(scfg, svc, hub, metrics, nil, map[string]server.Pinger{dbName: db.Ping}, log)
	ts.srv = srv
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		files.Close()
		svc.Close()
		db.Close()
		t.Fatalf("listen: %v", err)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	ts.svc = svc
	ts.storeName = dbName
	ts.db, _ = db.(*storage.DB) // nil on PostgreSQL: SQLite-only tests use it
	ts.metrics = metrics
	ts.files = files
	ts.Host = l.Addr().String()
	ts.URL = "http://" + ts.Host
	var once sync.Once
	ts.stop = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			// As in main.go: stop taking work, flush acks and receipts,
			// then let the writer commit what is queued.
			if err := srv.Shutdown(ctx); err != nil {
				t.Errorf("server shutdown: %v", err)
			}
			if err := <-errc; err != nil {
				t.Errorf("serve: %v", err)
			}
			svc.Close()
			if ts.cfg.push != nil {
				ts.cfg.push.Close()
			}
			files.Close()
			if err := db.Close(); err != nil {
				t.Errorf("closing the database: %v", err)
			}
		})
	}
}

// restart shuts the server down and starts it again on the same database
// file, on a new port.
func (ts *testServer) restart() {
	ts.t.Helper()
	ts.stop()
	ts.http.CloseIdleConnections()
	ts.start()
}

func (ts *testServer) unique(prefix string) string {
	return fmt.Sprintf("%s%d", prefix, ts.n.Add(1))
}

// syncBuffer collects the server's log for failing tests.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Wire types, as PROTOCOL.md describes them.
type (
	userJSON struct {
		ID          string `json:"id"`
		Username    string `json:"username"`
		DisplayName string `json:"display_name"`
	}
	messageJSON struct {
		Conv        string `json:"conv"`
		Seq         int64  `json:"seq"`
		From        string `json:"from"`
		ClientMsgID string `json:"client_msg_id"`
		Kind        string `json:"kind"`
		Body        string `json:"body"`
		TS          int64  `json:"ts"`
	}

	conversationJSON struct {
		ID           string       `json:"id"`
		Kind         string       `json:"kind"`
		Name         string       `json:"name"`
		MembersCount int          `json:"members_count"`
		MaxSeq       int64        `json:"max_seq"`
		MinSeq       int64        `json:"min_seq"`
		ReadSeq      int64        `json:"read_seq"`
		LastAckSeq   int64        `json:"last_ack_seq"`
		Unread       int64        `json:"unread"`
		Mentions     *int64       `json:"mentions"`
		Version      int64        `json:"version"`
		Role         string       `json:"role"`
		Left         bool         `json:"left"`
		LastMessage  *messageJSON `json:"last_message"`
	}
	memberJSON struct {
		UserID     string `json:"user_id"`
		Role       string `json:"role"`
		LastAckSeq int64  `json:"last_ack_seq"`
		ReadSeq    int64  `json:"read_seq"`
	}
	pageJSON struct {
		Messages  []messageJSON `json:"messages"`
		MaxSeq    int64         `json:"max_seq"`
		Completed bool          `json:"completed"`
	}
	changesJSON struct {
		Conversations []conversationJSON `json:"conversations"`
		MaxVersion    int64              `json:"max_version"`
		Completed     bool               `json:"completed"`
	}
	readJSON struct {
		User string `json:"user"`
		Seq  int64  `json:"seq"`
	}
)

// listKeys are the fields the protocol says are arrays: never null.
var listKeys = map[string]bool{"messages": true, "users": true, "members": true, "conversations": true, "reads": true, "added": true}

// checkLists reports list fields that are null anywhere in v.
func checkLists(v any) []string {
	var bad []string
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if e == nil && listKeys[k] {
					bad = append(bad, path+"."+k)
				}
				walk(path+"."+k, e)
			}
		case []any:
			for i, e := range x {
				walk(fmt.Sprintf("%s[%d]", path, i), e)
			}
		}
	}
	walk("", v)
	return bad
}

// response is an HTTP answer; JSON is the body decoded generically (nil
// when there is no body).
type response struct {
	Status int
	Header http.Header
	Body   []byte
	JSON   map[string]any
}

func (r response) String() string { return fmt.Sprintf("%d %s", r.Status, bytes.TrimSpace(r.Body)) }

// decode decodes the body into v.
func (r response) decode(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("decoding %s: %v", r, err)
	}
}

// errorCode is error.code of an error body, "" if there is none.
func (r response) errorCode() string {
	e, _ := r.JSON["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

// want fails the test unless the status is status.
func (r response) want(t testing.TB, status int) response {
	t.Helper()
	if r.Status != status {
		t.Fatalf("got %s, want status %d", r, status)
	}
	return r
}

// wantError checks an error answer: status, the code, and a message.
func (r response) wantError(t testing.TB, status int, code string) response {
	t.Helper()
	if got, want := r.Status, status; got != want {
		t.Errorf("status: got %d, want %d (%s)", got, want, r)
	}
	if got, want := r.errorCode(), code; got != want {
		t.Errorf("error code: got %q, want %q (%s)", got, want, r)
	}
	e, _ := r.JSON["error"].(map[string]any)
	if m, _ := e["message"].(string); m == "" {
		t.Errorf("error without message: %s", r)
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("error Content-Type: got %q, want application/json", ct)
	}
	return r
}

// doErr sends an HTTP request. body is nil (none), a string or []byte
// (sent as is) or anything else (sent as JSON).
func (ts *testServer) doErr(method, path, token string, body any, header http.Header) (response, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			return response{}, err
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, ts.URL+path, rd)
	if err != nil {
		return response{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	res, err := ts.http.Do(req)
	if err != nil {
		return response{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return response{}, err
	}
	r := response{Status: res.StatusCode, Header: res.Header, Body: b}
	if len(bytes.TrimSpace(b)) > 0 {
		if err := json.Unmarshal(b, &r.JSON); err != nil {
			return r, fmt.Errorf("%s %s: body is not a JSON object: %v: %q", method, path, err, b)
		}
		if bad := checkLists(r.JSON); len(bad) > 0 {
			return r, fmt.Errorf("%s %s: null lists %v in %s", method, path, bad, b)
		}
	}
	return r, nil
}

func (ts *testServer) do(t testing.TB, method, path, token string, body any) response {
	t.Helper()
	r, err := ts.doErr(method, path, token, body, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// account is a registered user with a token.
type account struct {
	ts    *testServer
	User  userJSON
	Token string
}

func (a *account) ID() string { return a.User.ID }

// register creates a user named name with the password "password-"+name.
func (ts *testServer) register(t testing.TB, name string) *account {
	t.Helper()
	r := ts.do(t, "POST", "/api/v1/auth/register", "", map[string]string{"username": name, "password": "password-" + name})
	r.want(t, http.StatusCreated)
	a := &account{ts: ts}
	var reply struct {
		User  userJSON `json:"user"`
		Token string   `json:"token"`
	}
	r.decode(t, &reply)
	a.User, a.Token = reply.User, reply.Token
	if a.User.ID == "" || a.Token == "" {
		t.Fatalf("register %s: no id or token in %s", name, r)
	}
	return a
}

// registerN registers n users named prefix1..prefixN.
func (ts *testServer) registerN(t testing.TB, prefix string, n int) []*account {
	t.Helper()
	out := make([]*account, n)
	for i := range out {
		out[i] = ts.register(t, fmt.Sprintf("%s%d", prefix, i+1))
	}
	return out
}

func (a *account) get(t testing.TB, path string) response {
	t.Helper()
	return a.ts.do(t, "GET", path, a.Token, nil)
}

func (a *account) post(t testing.TB, path string, body any) response {
	t.Helper()
	if body == nil {
		body = "{}"
	}
	return a.ts.do(t, "POST", path, a.Token, body)
}

func (a *account) del(t testing.TB, path string) response {
	t.Helper()
	return a.ts.do(t, "DELETE", path, a.Token, nil)
}

func convPath(conv string, rest ...string) string {
	p := "/api/v1/conversations/" + url.PathEscape(conv)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// direct opens the direct conversation with peer (200 or 201).
func (a *account) direct(t testing.TB, peer *account) conversationJSON {
	t.Helper()
	r := a.post(t, "/api/v1/conversations/direct", map[string]string{"user_id": peer.ID()})
	if r.Status != http.StatusOK && r.Status != http.StatusCreated {
		t.Fatalf("direct: %s", r)
	}
	var c struct {
		Conversation conversationJSON `json:"conversation"`
	}
	r.decode(t, &c)
	return c.Conversation
}

// group creates a group of a and members.
func (a *account) group(t testing.TB, name string, members ...*account) conversationJSON {
	t.Helper()
	ids := make([]string, 0, len(members))
	for _, m := range members {
		ids = append(ids, m.ID())
	}
	r := a.post(t, "/api/v1/groups", map[string]any{"name": name, "member_ids": ids}).want(t, http.StatusCreated)
	var c struct {
		Conversation conversationJSON `json:"conversation"`
	}
	r.decode(t, &c)
	return c.Conversation
}

// send sends a message over HTTP and expects it to be stored (201).
func (a *account) send(t testing.TB, conv, clientMsgID, body string) messageJSON {
	t.Helper()
	r := a.post(t, convPath(conv, "messages"), map[string]string{"client_msg_id": clientMsgID, "body": body}).want(t, http.StatusCreated)
	var reply struct {
		Message   messageJSON `json:"message"`
		Duplicate *bool       `json:"duplicate"`
	}
	r.decode(t, &reply)
	if reply.Duplicate == nil || *reply.Duplicate {
		t.Fatalf("send: duplicate should be false: %s", r)
	}
	return reply.Message
}

// sendN sends n messages over HTTP, one after another.
func (a *account) sendN(t testing.TB, conv string, n int) []messageJSON {
	t.Helper()
	out := make([]messageJSON, n)
	for i := range out {
		id := a.ts.unique("m")
		out[i] = a.send(t, conv, id, "body "+id)
	}
	return out
}

func (a *account) conversation(t testing.TB, conv string) conversationJSON {
	t.Helper()
	var c struct {
		Conversation conversationJSON `json:"conversation"`
	}
	a.get(t, convPath(conv)).want(t, http.StatusOK).decode(t, &c)
	return c.Conversation
}

func (a *account) members(t testing.TB, conv string) []memberJSON {
	t.Helper()
	var m struct {
		Members []memberJSON `json:"members"`
	}
	a.get(t, convPath(conv, "members")).want(t, http.StatusOK).decode(t, &m)
	return m.Members
}

// page is GET .../messages?query.
func (a *account) page(t testing.TB, conv, query string) pageJSON {
	t.Helper()
	var p pageJSON
	a.get(t, convPath(conv, "messages")+"?"+query).want(t, http.StatusOK).decode(t, &p)
	return p
}

// all pages through everything a may see of conv.
func (a *account) all(t testing.TB, conv string) []messageJSON {
	t.Helper()
	var out []messageJSON
	after := int64(0)
	for {
		p := a.page(t, conv, fmt.Sprintf("after_seq=%d&limit=1000", after))
		out = append(out, p.Messages...)
		if p.Completed {
			return out
		}
		if len(p.Messages) == 0 {
			t.Fatalf("empty page that is not completed after %d", after)
		}
		after = p.Messages[len(p.Messages)-1].Seq
	}
}

func (a *account) changes(t testing.TB, since int64, limit int) changesJSON {
	t.Helper()
	q := fmt.Sprintf("/api/v1/conversations?since=%d", since)
	if limit > 0 {
		q += fmt.Sprintf("&limit=%d", limit)
	}
	var c changesJSON
	a.get(t, q).want(t, http.StatusOK).decode(t, &c)
	return c
}

func (a *account) sequences(t testing.TB) int64 {
	t.Helper()
	var s struct {
		Conversations *int64 `json:"conversations"`
	}
	a.get(t, "/api/v1/sequences").want(t, http.StatusOK).decode(t, &s)
	if s.Conversations == nil {
		t.Fatal("sequences without conversations")
	}
	return *s.Conversations
}

func seqsOf(ms []messageJSON) []int64 {
	out := make([]int64, len(ms))
	for i, m := range ms {
		out[i] = m.Seq
	}
	return out
}

// seqRange is lo..hi.
func seqRange(lo, hi int64) []int64 {
	out := []int64{}
	for s := lo; s <= hi; s++ {
		out = append(out, s)
	}
	return out
}

func equalSeqs(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// frame is any server frame. Fields whose JSON type depends on the frame
// type (message, user) are kept raw.
type frame struct {
	Type         string          `json:"type"`
	Req          string          `json:"req"`
	Code         string          `json:"code"`
	RawMessage   json.RawMessage `json:"message"`
	RetryAfterMS int64           `json:"retry_after_ms"`
	Duplicate    *bool           `json:"duplicate"`
	Conv         string          `json:"conv"`
	Messages     []messageJSON   `json:"messages"`
	MaxSeq       int64           `json:"max_seq"`
	Completed    bool            `json:"completed"`
	Seq          int64           `json:"seq"`
	RawUser      json.RawMessage `json:"user"`
	Reads        []readJSON      `json:"reads"`
	Session      string          `json:"session"`
	Sequences    *struct {
		Conversations int64 `json:"conversations"`
	} `json:"sequences"`
	Conversation *conversationJSON `json:"conversation"`

	raw []byte
}

func (f frame) String() string { return string(f.raw) }

// message is the message of a msg or sent frame.
func (f frame) message() messageJSON {
	var m messageJSON
	_ = json.Unmarshal(f.RawMessage, &m)
	return m
}

// errorMessage is the message of an error frame.
func (f frame) errorMessage() string {
	var s string
	_ = json.Unmarshal(f.RawMessage, &s)
	return s
}

// userObject is the user of a hello frame.
func (f frame) userObject() userJSON {
	var u userJSON
	_ = json.Unmarshal(f.RawUser, &u)
	return u
}

// userID is the user of a receipt frame.
func (f frame) userID() string {
	var s string
	_ = json.Unmarshal(f.RawUser, &s)
	return s
}

// Frame predicates.
func ofType(typ string) func(frame) bool { return func(f frame) bool { return f.Type == typ } }

func withReq(req string) func(frame) bool { return func(f frame) bool { return f.Req == req } }

// wsClient is a WebSocket connection with a goroutine that reads every
// frame into a list the test waits on.
type wsClient struct {
	t     testing.TB
	name  string
	conn  *websocket.Conn
	hello frame

	reqs atomic.Int64

	mu      sync.Mutex
	frames  []frame
	used    []bool
	first   int                      // frames before first are all used
	live    map[string][]messageJSON // per conv, from msg and batch frames, in arrival order
	err     error                    // why reading stopped
	changed chan struct{}            // closed and replaced on every change
	done    chan struct{}
	reading bool
}

func (ts *testServer) wsURL(token string) string {
	u := "ws://" + ts.Host + "/api/v1/ws"
	if token != "" {
		u += "?token=" + url.QueryEscape(token)
	}
	return u
}

// dialRaw opens a WebSocket without a client around it.
func (ts *testServer) dialRaw(token string, opts *websocket.DialOptions) (*websocket.Conn, *http.Response, error) {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	return websocket.Dial(ctx, ts.wsURL(token), opts)
}

// dial connects a's session called name and waits for its hello frame.
func (a *account) dial(t testing.TB, name string) *wsClient {
	t.Helper()
	c := a.dialPaused(t, name, nil)
	c.resume()
	c.hello = c.next(t, "hello", func(frame) bool { return true })
	if c.hello.Type != "hello" {
		t.Fatalf("%s: first frame: got %s, want hello", name, c.hello)
	}
	return c
}

// dialPaused connects but does not read until resume, so that the server
// finds the session slow.
func (a *account) dialPaused(t testing.TB, name string, opts *websocket.DialOptions) *wsClient {
	t.Helper()
	conn, res, err := a.ts.dialRaw(a.Token, opts)
	if err != nil {
		status := 0
		if res != nil {
			status = res.StatusCode
		}
		t.Fatalf("%s: dial: %v (status %d)", name, err, status)
	}
	// Batch frames may be large; the client accepts anything.
	conn.SetReadLimit(1 << 30)
	c := &wsClient{
		t:       t,
		name:    name,
		conn:    conn,
		live:    make(map[string][]messageJSON),
		changed: make(chan struct{}),
		done:    make(chan struct{}),
	}
	t.Cleanup(func() {
		conn.CloseNow()
		if c.started() {
			select {
			case <-c.done:
			case <-time.After(waitTimeout):
				t.Errorf("%s: reader did not stop", name)
			}
		}
	})
	return c
}

func (c *wsClient) started() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reading
}

// resume starts the reader.
func (c *wsClient) resume() {
	c.mu.Lock()
	c.reading = true
	c.mu.Unlock()
	go c.readLoop()
}

func (c *wsClient) readLoop() {
	defer close(c.done)
	for {
		typ, data, err := c.conn.Read(context.Background())
		c.mu.Lock()
		if err != nil {
			c.err = err
			c.notifyLocked()
			c.mu.Unlock()
			return
		}
		f := frame{raw: data}
		if typ != websocket.MessageText {
			c.t.Errorf("%s: server sent a %v frame", c.name, typ)
		} else if err := json.Unmarshal(data, &f); err != nil {
			c.t.Errorf("%s: server frame is not a JSON object: %v: %q", c.name, err, data)
		} else {
			var generic map[string]any
			_ = json.Unmarshal(data, &generic)
			if bad := checkLists(generic); len(bad) > 0 {
				c.t.Errorf("%s: null lists %v in %s", c.name, bad, data)
			}
		}
		c.frames = append(c.frames, f)
		c.used = append(c.used, false)
		switch f.Type {
		case "msg":
			m := f.message()
			c.live[m.Conv] = append(c.live[m.Conv], m)
		case "batch":
			c.live[f.Conv] = append(c.live[f.Conv], f.Messages...)
		}
		c.notifyLocked()
		c.mu.Unlock()
	}
}

func (c *wsClient) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// await waits until cond, evaluated under c.mu, holds.
func (c *wsClient) await(cond func() bool) error {
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		ok := cond()
		ch, err := c.changed, c.err
		c.mu.Unlock()
		if ok {
			return nil
		}
		if err != nil {
			return fmt.Errorf("connection ended: %w", err)
		}
		select {
		case <-ch:
		case <-deadline.C:
			return errors.New("timed out")
		}
	}
}

// tryNext returns the first frame not returned before that matches pred.
func (c *wsClient) tryNext(pred func(frame) bool) (frame, error) {
	var got frame
	err := c.await(func() bool {
		for i := c.first; i < len(c.frames); i++ {
			if !c.used[i] && pred(c.frames[i]) {
				c.used[i] = true
				for c.first < len(c.used) && c.used[c.first] {
					c.first++
				}
				got = c.frames[i]
				return true
			}
		}
		return false
	})
	return got, err
}

// next is tryNext that fails the test.
func (c *wsClient) next(t testing.TB, what string, pred func(frame) bool) frame {
	t.Helper()
	f, err := c.tryNext(pred)
	if err != nil {
		t.Fatalf("%s: waiting for %s: %v\nframes: %s", c.name, what, err, c.dump())
	}
	return f
}

// dump lists the frames received, for failure messages.
func (c *wsClient) dump() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	for i, f := range c.frames {
		if i >= 50 {
			fmt.Fprintf(&b, "\n  ... %d more", len(c.frames)-i)
			break
		}
		s := f.String()
		if len(s) > 300 {
			s = s[:300] + "..."
		}
		fmt.Fprintf(&b, "\n  %s", s)
	}
	return b.String()
}

// received returns every frame so far that matches pred.
func (c *wsClient) received(pred func(frame) bool) []frame {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []frame
	for _, f := range c.frames {
		if pred(f) {
			out = append(out, f)
		}
	}
	return out
}

// liveMessages returns the messages of conv received in msg and batch
// frames, in arrival order.
func (c *wsClient) liveMessages(conv string) []messageJSON {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]messageJSON(nil), c.live[conv]...)
}

// waitLive waits until the client has received at least n live messages
// of conv.
func (c *wsClient) waitLive(t testing.TB, conv string, n int) []messageJSON {
	t.Helper()
	if err := c.awaitLive(conv, n); err != nil {
		t.Fatalf("%s: waiting for %d messages of %s: %v (have %v)", c.name, n, conv, err, seqsOf(c.liveMessages(conv)))
	}
	return c.liveMessages(conv)
}

func (c *wsClient) awaitLive(conv string, n int) error {
	return c.await(func() bool { return len(c.live[conv]) >= n })
}

// waitLiveSeq waits for message seq of conv to arrive live.
func (c *wsClient) waitLiveSeq(t testing.TB, conv string, seq int64) messageJSON {
	t.Helper()
	var got messageJSON
	err := c.await(func() bool {
		for _, m := range c.live[conv] {
			if m.Seq == seq {
				got = m
				return true
			}
		}
		return false
	})
	if err != nil {
		t.Fatalf("%s: waiting for message %d of %s: %v (have %v)", c.name, seq, conv, err, seqsOf(c.liveMessages(conv)))
	}
	return got
}

// hasLiveSeq reports whether seq of conv arrived live.
func (c *wsClient) hasLiveSeq(conv string, seq int64) bool {
	for _, m := range c.liveMessages(conv) {
		if m.Seq == seq {
			return true
		}
	}
	return false
}

// write sends v as a JSON text frame.
func (c *wsClient) write(t testing.TB, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	c.writeRaw(t, websocket.MessageText, b)
}

func (c *wsClient) writeErr(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	return c.conn.Write(ctx, websocket.MessageText, b)
}

func (c *wsClient) writeRaw(t testing.TB, typ websocket.MessageType, b []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := c.conn.Write(ctx, typ, b); err != nil {
		t.Fatalf("%s: write: %v", c.name, err)
	}
}

// newReq returns a request id unique to this client.
func (c *wsClient) newReq() string { return fmt.Sprintf("%s-%d", c.name, c.reqs.Add(1)) }

// call sends frame f with a fresh req and returns the reply that echoes it.
func (c *wsClient) call(t testing.TB, f map[string]any) frame {
	t.Helper()
	req := c.newReq()
	f["req"] = req
	c.write(t, f)
	return c.next(t, "reply to "+req, withReq(req))
}

// ping is a barrier: every frame the server queued to this session before
// it read the ping has arrived when it returns.
func (c *wsClient) ping(t testing.TB) {
	t.Helper()
	if r := c.call(t, map[string]any{"type": "ping"}); r.Type != "pong" {
		t.Fatalf("%s: ping answered with %s", c.name, r)
	}
}

// sendWS sends a message and returns the sent frame.
func (c *wsClient) sendWS(t testing.TB, conv, clientMsgID, body string) frame {
	t.Helper()
	return c.call(t, map[string]any{"type": "send", "conv": conv, "client_msg_id": clientMsgID, "body": body})
}

// pipeline writes n send frames without waiting, then waits for every
// reply, and returns the stored messages in send order.
func (c *wsClient) pipeline(t testing.TB, conv string, n int, body string) []messageJSON {
	t.Helper()
	reqs := make([]string, n)
	for i := range reqs {
		reqs[i] = c.newReq()
		c.write(t, map[string]any{"type": "send", "req": reqs[i], "conv": conv, "client_msg_id": reqs[i], "body": body + " " + reqs[i]})
	}
	out := make([]messageJSON, n)
	for i, req := range reqs {
		f := c.next(t, "sent "+req, withReq(req))
		if f.Type != "sent" {
			t.Fatalf("%s: send %s: got %s, want sent", c.name, req, f)
		}
		out[i] = f.message()
	}
	return out
}

// closeStatus waits for the connection to end and returns its close
// status (-1 when it ended without a close frame).
func (c *wsClient) closeStatus(t testing.TB) websocket.StatusCode {
	t.Helper()
	if err := c.await(func() bool { return c.err != nil }); err != nil {
		t.Fatalf("%s: waiting for the connection to close: %v", c.name, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return websocket.CloseStatus(c.err)
}

// answered reports whether a frame answering req has arrived; call it
// under c.mu (in await).
func (c *wsClient) answered(req string) bool {
	for i := len(c.frames) - 1; i >= 0; i-- {
		if c.frames[i].Req == req {
			return true
		}
	}
	return false
}
