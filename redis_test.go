package main

// Process-level tests of the optional Redis (issue 5): real imserver
// processes against real redis-server processes started by the tests, on
// ports of their own (never the shared 6379), with persistence off so that a
// restarted Redis comes back empty, like a crashed cache.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// ---------------------------------------------------------------- redis-server

type redisServer struct {
	t    *testing.T
	port int
	cmd  *exec.Cmd
	done chan struct{}
	logs *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("... (%d lines before)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// startRedis runs a redis-server of the test's own and kills it at cleanup.
// The test is skipped when redis-server is not installed.
func startRedis(t *testing.T) *redisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not installed")
	}
	r := &redisServer{t: t, logs: &syncBuffer{}}
	var err error
	for range 5 { // the probed port may be taken before redis binds it
		_, p, _ := net.SplitHostPort(freeAddr(t))
		if r.port, _ = strconv.Atoi(p); r.port == 6379 {
			continue
		}
		if err = r.start(); err == nil {
			t.Cleanup(func() {
				r.kill()
				if t.Failed() {
					t.Logf("redis-server output:\n%s", lastLines(r.logs.String(), 30))
				}
			})
			return r
		}
	}
	t.Fatalf("start redis-server: %v", err)
	return nil
}

func (r *redisServer) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port)) }
func (r *redisServer) url() string  { return "redis://" + r.addr() + "/0" }

func (r *redisServer) start() error {
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", r.t.TempDir(), "--loglevel", "warning")
	cmd.Stdout, cmd.Stderr = r.logs, r.logs
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	r.cmd, r.done = cmd, done
	deadline := time.Now().Add(10 * time.Second)
	for {
		reply, err := r.command("PING")
		if err == nil && reply == "PONG" {
			return nil
		}
		select {
		case <-done:
			r.cmd = nil
			return fmt.Errorf("redis-server on port %d exited (%v)", r.port, err)
		default:
		}
		if time.Now().After(deadline) {
			r.kill()
			return fmt.Errorf("redis-server on port %d: no PONG: %q %v", r.port, reply, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// kill stops redis-server with SIGKILL, as a crash would.
func (r *redisServer) kill() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	<-r.done
	r.cmd = nil
}

// restart brings up a fresh, empty redis-server on the same port.
func (r *redisServer) restart() {
	r.t.Helper()
	r.kill()
	var err error
	for range 100 {
		if err = r.start(); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.t.Fatalf("restart redis-server on port %d: %v", r.port, err)
}

// command sends one command in RESP and returns a simple reply (status,
// integer or bulk string) as text; an error reply is an error.
func (r *redisServer) command(args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", r.addr(), time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(c, b.String()); err != nil {
		return "", err
	}
	rd := bufio.NewReader(c)
	line, err := rd.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, _ := strconv.Atoi(line[1:])
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	default:
		return line, nil
	}
}

func (r *redisServer) flushAll(t *testing.T) {
	t.Helper()
	if reply, err := r.command("FLUSHALL"); err != nil || reply != "OK" {
		t.Fatalf("FLUSHALL: %q %v", reply, err)
	}
}

// ---------------------------------------------------------------- imserver

// redisConfig is a config with Redis and with limits out of the way.
func redisConfig(t *testing.T, dir string, r *redisServer) string {
	t.Helper()
	return writeConfig(t, dir, fmt.Sprintf(`redis: %s
limits:
  send_rate: 1000000
  send_burst: 1000000
websocket:
  session_queue: 100000
`, r.url()))
}

// redisPair is two server processes, A and B, on one database file and
// one Redis, as a deployment of several processes on one host runs them.
type redisPair struct {
	r       *redisServer
	a, b    *lproc
	db, cfg string // the database file and the config, to start more
}

// startRedisPair starts Redis and the two processes on a database named
// name under a temporary directory.
func startRedisPair(t *testing.T, name string) redisPair {
	t.Helper()
	p := redisPair{r: startRedis(t)}
	dir := t.TempDir()
	p.db = filepath.Join(dir, name)
	p.cfg = redisConfig(t, dir, p.r)
	p.a = startLogged(t, "A", p.db, p.cfg)
	p.b = startLogged(t, "B", p.db, p.cfg)
	return p
}

// lproc is a server subprocess whose output is kept.
type lproc struct {
	*proc
	exited chan struct{}
}

// kill stops the process with SIGKILL and waits for it.
func (p *lproc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// startLogged is startServer with the process output kept and printed when
// the test fails (the servers' logs are what explains a Redis failure).
func startLogged(t *testing.T, name, db, config string) *lproc {
	t.Helper()
	addr := freeAddr(t)
	cmd := exec.Command(serverBin, "serve", "--addr", addr, "--db", db, "--config", config)
	cmd.Env = serverEnv()
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	p := &lproc{proc: &proc{cmd: cmd, base: "http://" + addr}, exited: exited}
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("imserver %s output:\n%s", name, lastLines(logs.String(), 60))
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			t.Fatalf("imserver %s exited before becoming healthy; output:\n%s", name, logs.String())
		default:
		}
		if resp, err := http.Get(p.base + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("imserver %s did not become healthy; output:\n%s", name, logs.String())
	return nil
}

type rUser struct {
	ID    string
	Token string
}

func registerUser(t *testing.T, p *lproc, name string) rUser {
	t.Helper()
	var out struct {
		Token string `json:"token"`
		User  struct {
			ID string `json:"id"`
		} `json:"user"`
	}
	if code := p.do(t, "POST", "/api/v1/auth/register", "", map[string]string{"username": name, "password": "password123"}, &out); code != 201 {
		t.Fatalf("register %s: %d", name, code)
	}
	return rUser{ID: out.User.ID, Token: out.Token}
}

type convOut struct {
	Conversation struct {
		ID     string `json:"id"`
		MaxSeq int64  `json:"max_seq"`
		Left   bool   `json:"left"`
	} `json:"conversation"`
}

func newGroup(t *testing.T, p *lproc, owner rUser, members ...rUser) string {
	t.Helper()
	ids := []string{}
	for _, m := range members {
		ids = append(ids, m.ID)
	}
	var out convOut
	if code := p.do(t, "POST", "/api/v1/groups", owner.Token, map[string]any{"name": "g", "member_ids": ids}, &out); code != 201 {
		t.Fatalf("create group: %d", code)
	}
	return out.Conversation.ID
}

func newDirect(t *testing.T, p *lproc, a, b rUser) string {
	t.Helper()
	var out convOut
	if code := p.do(t, "POST", "/api/v1/conversations/direct", a.Token, map[string]any{"user_id": b.ID}, &out); code != 200 && code != 201 {
		t.Fatalf("create direct: %d", code)
	}
	return out.Conversation.ID
}

// sendResult is the outcome of one send over HTTP or WebSocket.
type sendResult struct {
	ID     string
	Conv   string
	Status int    // HTTP status; for WebSocket 201 for sent, 0 for an error frame
	Code   string // error code
	Seq    int64
	Dup    bool
	Start  time.Time
	End    time.Time
	Err    error // transport error
}

func (r sendResult) ok() bool {
	return r.Err == nil && r.Code == "" && (r.Status == 201 || r.Status == 200)
}

var sendClient = &http.Client{Timeout: 20 * time.Second}

// httpSend posts one message; it never calls t.Fatal, so goroutines may use it.
func httpSend(p *lproc, token, conv, id, body string) sendResult {
	res := sendResult{ID: id, Conv: conv, Start: time.Now()}
	b, _ := json.Marshal(map[string]string{"client_msg_id": id, "body": body})
	req, _ := http.NewRequest("POST", p.base+"/api/v1/conversations/"+conv+"/messages", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := sendClient.Do(req)
	if err != nil {
		res.End, res.Err = time.Now(), err
		return res
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	res.End, res.Status = time.Now(), resp.StatusCode
	var out struct {
		Message   rMsg `json:"message"`
		Duplicate bool `json:"duplicate"`
		Error     *struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		res.Err = fmt.Errorf("status %d, body %q: %v", resp.StatusCode, data, err)
		return res
	}
	if out.Error != nil {
		res.Code = out.Error.Code
	}
	res.Seq, res.Dup = out.Message.Seq, out.Duplicate
	return res
}

// rMsg is a message as a client sees it.
type rMsg struct {
	Conv        string `json:"conv"`
	Seq         int64  `json:"seq"`
	From        string `json:"from"`
	ClientMsgID string `json:"client_msg_id"`
	Body        string `json:"body"`
}

// wsClient is one WebSocket session with a reader that sorts what arrives:
// sent/error answers by req (the tests use client_msg_id as req), live
// messages (msg and batch frames) in arrival order, and other frame types
// counted.
type wsClient struct {
	name string
	c    *websocket.Conn
	ctx  context.Context

	mu       sync.Mutex
	answers  map[string]sendResult
	started  map[string]time.Time
	live     []rMsg
	frames   map[string]int
	other    []string // frames other than msg/batch/sent/storm, for the log
	storms   []bool   // active of each storm frame, in order
	closed   bool
	closeErr error
	changed  chan struct{} // closed and replaced on every change
	inflight chan struct{} // window of unanswered sends, if used
}

func dialWS(t *testing.T, ctx context.Context, p *lproc, name, token string) *wsClient {
	t.Helper()
	c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(p.base, "http")+"/api/v1/ws?token="+token, nil)
	if err != nil {
		code := 0
		if resp != nil {
			code = resp.StatusCode
		}
		t.Fatalf("dial %s: %v (status %d)", name, err, code)
	}
	c.SetReadLimit(-1) // batch frames can be large
	w := &wsClient{name: name, c: c, ctx: ctx, answers: map[string]sendResult{}, started: map[string]time.Time{},
		frames: map[string]int{}, changed: make(chan struct{})}
	t.Cleanup(func() { c.CloseNow() })
	_, data, err := c.Read(ctx)
	if err != nil || !strings.Contains(string(data), `"hello"`) {
		t.Fatalf("%s: hello: %v %s", name, err, data)
	}
	go w.read()
	return w
}

func (w *wsClient) notifyLocked() {
	close(w.changed)
	w.changed = make(chan struct{})
}

func (w *wsClient) read() {
	for {
		_, data, err := w.c.Read(w.ctx)
		if err != nil {
			w.mu.Lock()
			w.closed, w.closeErr = true, err
			w.notifyLocked()
			w.mu.Unlock()
			return
		}
		var f struct {
			Type      string          `json:"type"`
			Req       string          `json:"req"`
			Code      string          `json:"code"`
			RawMsg    json.RawMessage `json:"message"` // a string in error frames
			Message   rMsg            `json:"-"`
			Messages  []rMsg          `json:"messages"`
			Duplicate bool            `json:"duplicate"`
		}
		err = json.Unmarshal(data, &f)
		if err == nil && (f.Type == "sent" || f.Type == "msg") {
			err = json.Unmarshal(f.RawMsg, &f.Message)
		}
		if err != nil {
			w.mu.Lock()
			w.other = append(w.other, "undecodable: "+string(data))
			w.mu.Unlock()
			continue
		}
		now := time.Now()
		w.mu.Lock()
		w.frames[f.Type]++
		switch f.Type {
		case "sent", "error":
			if f.Req != "" {
				res := sendResult{ID: f.Req, Start: w.started[f.Req], End: now}
				if f.Type == "sent" {
					res.Status, res.Seq, res.Dup, res.Conv = 201, f.Message.Seq, f.Duplicate, f.Message.Conv
					if f.Duplicate {
						res.Status = 200
					}
				} else {
					res.Code = f.Code
				}
				w.answers[f.Req] = res
				if w.inflight != nil {
					select {
					case <-w.inflight:
					default:
					}
				}
			} else {
				w.other = append(w.other, string(data))
			}
		case "msg":
			w.live = append(w.live, f.Message)
		case "batch":
			w.live = append(w.live, f.Messages...)
		case "storm":
			var st struct {
				Active bool `json:"active"`
			}
			_ = json.Unmarshal(data, &st)
			w.storms = append(w.storms, st.Active)
		case "pong", "receipt", "read":
		default:
			if len(data) > 300 {
				data = data[:300]
			}
			w.other = append(w.other, string(data))
		}
		w.notifyLocked()
		w.mu.Unlock()
	}
}

// send writes a send frame with req = id.
func (w *wsClient) send(conv, id, body string) error {
	f, _ := json.Marshal(map[string]any{"type": "send", "req": id, "conv": conv, "client_msg_id": id, "body": body})
	w.mu.Lock()
	w.started[id] = time.Now()
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(w.ctx, 10*time.Second)
	defer cancel()
	return w.c.Write(ctx, websocket.MessageText, f)
}

// waitFor waits until cond (called under the lock) holds, or the timeout.
func (w *wsClient) waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		w.mu.Lock()
		ok, ch := cond(), w.changed
		w.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-deadline.C:
			w.mu.Lock()
			defer w.mu.Unlock()
			return cond()
		case <-w.ctx.Done():
			return false
		}
	}
}

func (w *wsClient) answer(id string) (sendResult, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r, ok := w.answers[id]
	return r, ok
}

// sendAndWait sends one message and waits for its answer.
func (w *wsClient) sendAndWait(conv, id, body string, timeout time.Duration) sendResult {
	start := time.Now()
	if err := w.send(conv, id, body); err != nil {
		return sendResult{ID: id, Conv: conv, Start: start, End: time.Now(), Err: err}
	}
	if !w.waitFor(timeout, func() bool { _, ok := w.answers[id]; return ok || w.closed }) {
		return sendResult{ID: id, Conv: conv, Start: start, End: time.Now(), Err: fmt.Errorf("no answer within %v", timeout)}
	}
	r, ok := w.answer(id)
	if !ok {
		w.mu.Lock()
		err := w.closeErr
		w.mu.Unlock()
		return sendResult{ID: id, Conv: conv, Start: start, End: time.Now(), Err: fmt.Errorf("connection closed: %v", err)}
	}
	r.Conv = conv
	return r
}

// pipeline sends all ids (conv, id pairs) with at most window unanswered,
// and waits for every answer.
func (w *wsClient) pipeline(t *testing.T, msgs [][2]string, window int, timeout time.Duration) []sendResult {
	t.Helper()
	w.mu.Lock()
	w.inflight = make(chan struct{}, window)
	w.mu.Unlock()
	for _, m := range msgs {
		select {
		case w.inflight <- struct{}{}:
		case <-time.After(timeout):
			t.Errorf("%s: pipeline stalled: no answer for %v", w.name, timeout)
			return nil
		}
		if err := w.send(m[0], m[1], "x"); err != nil {
			t.Errorf("%s: send %s: %v", w.name, m[1], err)
			return nil
		}
	}
	if !w.waitFor(timeout, func() bool {
		for _, m := range msgs {
			if _, ok := w.answers[m[1]]; !ok {
				return false
			}
		}
		return true
	}) {
		t.Errorf("%s: not every pipelined send was answered within %v", w.name, timeout)
	}
	out := make([]sendResult, 0, len(msgs))
	for _, m := range msgs {
		if r, ok := w.answer(m[1]); ok {
			r.Conv = m[0]
			out = append(out, r)
		}
	}
	return out
}

func (w *wsClient) liveCopy() []rMsg {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]rMsg(nil), w.live...)
}

func (w *wsClient) isClosed() (bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closed, w.closeErr
}

type healthOut struct {
	Status string            `json:"status"`
	Checks map[string]string `json:"checks"`
}

func health(p *lproc) (int, healthOut, error) {
	var h healthOut
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(p.base + "/healthz")
	if err != nil {
		return 0, h, err
	}
	defer resp.Body.Close()
	err = json.NewDecoder(resp.Body).Decode(&h)
	return resp.StatusCode, h, err
}

// checkStored checks a conversation's stored messages against the answers:
// strictly increasing seqs, each client_msg_id once, every answered message
// present with its answered seq. It returns the stored messages by id.
func checkStored(t *testing.T, label string, stored []storedMsg, answered []sendResult) map[string]storedMsg {
	t.Helper()
	byID := map[string]storedMsg{}
	for i, m := range stored {
		if i > 0 && m.Seq <= stored[i-1].Seq {
			t.Errorf("%s: stored seq %d follows %d: not strictly increasing", label, m.Seq, stored[i-1].Seq)
		}
		if prev, dup := byID[m.ClientMsgID]; dup {
			t.Errorf("%s: client_msg_id %s stored twice (seqs %d and %d)", label, m.ClientMsgID, prev.Seq, m.Seq)
		}
		byID[m.ClientMsgID] = m
	}
	for _, r := range answered {
		if !r.ok() {
			continue
		}
		m, ok := byID[r.ID]
		if !ok {
			t.Errorf("%s: %s was answered %d (seq %d) but is not stored", label, r.ID, r.Status, r.Seq)
			continue
		}
		if m.Seq != r.Seq {
			t.Errorf("%s: %s answered seq %d, stored seq %d", label, r.ID, r.Seq, m.Seq)
		}
	}
	return byID
}

// checkRealtimeOrder checks guarantee 1 as a client can observe it: in each
// conversation, a message sent after another one was answered has a larger
// seq (the first was committed before the second was even sent).
func checkRealtimeOrder(t *testing.T, label string, rs []sendResult) {
	t.Helper()
	byConv := map[string][]sendResult{}
	for _, r := range rs {
		if r.ok() && !r.Dup {
			byConv[r.Conv] = append(byConv[r.Conv], r)
		}
	}
	for conv, list := range byConv {
		ends := append([]sendResult(nil), list...)
		sort.Slice(ends, func(i, j int) bool { return ends[i].End.Before(ends[j].End) })
		starts := append([]sendResult(nil), list...)
		sort.Slice(starts, func(i, j int) bool { return starts[i].Start.Before(starts[j].Start) })
		var hi sendResult
		k, bad := 0, 0
		for _, r := range starts {
			for k < len(ends) && ends[k].End.Before(r.Start) {
				if ends[k].Seq > hi.Seq {
					hi = ends[k]
				}
				k++
			}
			if hi.Seq > 0 && r.Seq <= hi.Seq {
				if bad < 5 {
					t.Errorf("%s, conv %s: %s got seq %d although %s had been answered seq %d before it was sent", label, conv, r.ID, r.Seq, hi.ID, hi.Seq)
				}
				bad++
			}
		}
		if bad > 0 {
			t.Errorf("%s, conv %s: %d messages got a seq below one answered before they were sent", label, conv, bad)
		}
	}
}

func maxSeqOf(rs []sendResult) int64 {
	var m int64
	for _, r := range rs {
		if r.ok() && r.Seq > m {
			m = r.Seq
		}
	}
	return m
}

func minSeqOf(rs []sendResult) int64 {
	var m int64
	for _, r := range rs {
		if r.ok() && (m == 0 || r.Seq < m) {
			m = r.Seq
		}
	}
	return m
}

func requireAllOK(t *testing.T, label string, rs []sendResult, want int) {
	t.Helper()
	if len(rs) != want {
		t.Errorf("%s: %d answers, want %d", label, len(rs), want)
	}
	bad := 0
	for _, r := range rs {
		if !r.ok() || r.Dup {
			if bad < 5 {
				t.Errorf("%s: %s: status %d code %q dup %v err %v", label, r.ID, r.Status, r.Code, r.Dup, r.Err)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d sends failed", label, bad, len(rs))
	}
}

// ---------------------------------------------------------------- tests

// TestRedisFlushAllNeverGoesBack: seqs handed out after a FLUSHALL (between
// runs, in the middle of a pipelined run, and followed by a restart of
// imserver) are above every seq handed out before it, in a group and a
// direct conversation.
func TestRedisFlushAllNeverGoesBack(t *testing.T) {
	r := startRedis(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "flush.db")
	cfg := redisConfig(t, dir, r)
	p := startLogged(t, "A", db, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	alice, bob := registerUser(t, p, "alice"), registerUser(t, p, "bob")
	group := newGroup(t, p, alice, bob)
	direct := newDirect(t, p, alice, bob)
	convs := map[string]string{"group": group, "direct": direct}
	ws := dialWS(t, ctx, p, "alice", alice.Token)

	var all []sendResult
	// run sends n messages per conversation over the socket (pipelined) and
	// a few over HTTP.
	run := func(phase string, n int) []sendResult {
		t.Helper()
		var msgs [][2]string
		for i := range n {
			for _, name := range []string{"group", "direct"} {
				msgs = append(msgs, [2]string{convs[name], fmt.Sprintf("%s-%s-ws-%d", phase, name, i)})
			}
		}
		rs := ws.pipeline(t, msgs, 64, 30*time.Second)
		for i := range 5 {
			for _, name := range []string{"group", "direct"} {
				rs = append(rs, httpSend(p, alice.Token, convs[name], fmt.Sprintf("%s-%s-http-%d", phase, name, i), "x"))
			}
		}
		requireAllOK(t, phase, rs, 2*n+10)
		all = append(all, rs...)
		return rs
	}
	byConv := func(rs []sendResult, conv string) []sendResult {
		var out []sendResult
		for _, r := range rs {
			if r.Conv == conv {
				out = append(out, r)
			}
		}
		return out
	}
	above := func(label string, before, after []sendResult) {
		t.Helper()
		for name, conv := range convs {
			hi, lo := maxSeqOf(byConv(before, conv)), minSeqOf(byConv(after, conv))
			if lo <= hi {
				t.Errorf("%s, %s: a seq after the flush (%d) is not above every seq before it (%d)", label, name, lo, hi)
			}
		}
	}

	// 1. Between runs.
	before := run("a", 300)
	r.flushAll(t)
	after := run("b", 300)
	above("flush between runs", before, after)

	// 2. In the middle of a pipelined run: messages answered before the
	// FLUSHALL was issued are below every message sent after it returned.
	var msgs [][2]string
	for i := range 1000 {
		for _, name := range []string{"group", "direct"} {
			msgs = append(msgs, [2]string{convs[name], fmt.Sprintf("c-%s-%d", name, i)})
		}
	}
	var answeredBefore []sendResult
	var flushedAt time.Time
	done := make(chan []sendResult)
	go func() { done <- ws.pipeline(t, msgs, 64, 30*time.Second) }()
	if !ws.waitFor(30*time.Second, func() bool {
		n := 0
		for _, m := range msgs {
			if _, ok := ws.answers[m[1]]; ok {
				n++
			}
		}
		return n >= len(msgs)/3
	}) {
		t.Fatal("the third run did not get going")
	}
	ws.mu.Lock()
	for _, m := range msgs {
		if a, ok := ws.answers[m[1]]; ok {
			a.Conv = m[0]
			answeredBefore = append(answeredBefore, a)
		}
	}
	ws.mu.Unlock()
	r.flushAll(t)
	flushedAt = time.Now()
	third := <-done
	requireAllOK(t, "c", third, len(msgs))
	all = append(all, third...)
	var sentAfter []sendResult
	for _, a := range third {
		if a.Start.After(flushedAt) {
			sentAfter = append(sentAfter, a)
		}
	}
	t.Logf("mid-run flush: %d answered before it, %d sent after it", len(answeredBefore), len(sentAfter))
	if len(sentAfter) == 0 {
		t.Errorf("mid-run flush: no message was sent after the flush; the run was too short to test anything")
	}
	above("flush in the middle of a run", answeredBefore, sentAfter)

	// 3. FLUSHALL, then a restart of imserver: the new process loads the
	// bound from SQLite.
	prev := append([]sendResult(nil), all...)
	r.flushAll(t)
	ws.c.CloseNow()
	p.kill()
	p = startLogged(t, "A (restarted)", db, cfg)
	ws = dialWS(t, ctx, p, "alice after restart", alice.Token)
	last := run("d", 200)
	above("flush and imserver restart", prev, last)

	// 4. FLUSHALL every 20ms while four sockets (two per conversation)
	// pipeline: the allocator reloads from SQLite again and again, with
	// several refills racing for the lock.
	var wg sync.WaitGroup
	var mu sync.Mutex
	stopFlush := make(chan struct{})
	flushes := 0
	go func() {
		for {
			select {
			case <-stopFlush:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if _, err := r.command("FLUSHALL"); err != nil {
				t.Errorf("FLUSHALL: %v", err)
				return
			}
			mu.Lock()
			flushes++
			mu.Unlock()
		}
	}()
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := []string{"group", "direct"}[i%2]
			w := dialWS(t, ctx, p, fmt.Sprintf("alice-%d", i), alice.Token)
			var msgs [][2]string
			for j := range 500 {
				msgs = append(msgs, [2]string{convs[name], fmt.Sprintf("e%d-%s-%d", i, name, j)})
			}
			rs := w.pipeline(t, msgs, 32, 60*time.Second)
			mu.Lock()
			all = append(all, rs...)
			mu.Unlock()
			requireAllOK(t, fmt.Sprintf("flush storm, sender %d", i), rs, len(msgs))
		}()
	}
	wg.Wait()
	close(stopFlush)
	mu.Lock()
	t.Logf("flush storm: %d FLUSHALLs during 2000 sends", flushes)
	mu.Unlock()

	checkRealtimeOrder(t, "whole run", all)
	// Everything answered is stored once, in seq order.
	for name, conv := range convs {
		stored := fetchAll(t, p.proc, alice.Token, conv)
		byID := checkStored(t, name, stored, byConv(all, conv))
		if want := len(byConv(all, conv)); len(byID) != want {
			t.Errorf("%s: %d messages stored, %d sent", name, len(byID), want)
		}
		t.Logf("%s: %d messages, seqs %d..%d", name, len(stored), stored[0].Seq, stored[len(stored)-1].Seq)
	}
}

// TestRedisDownAndBack kills redis-server under load and brings it back
// empty: sends answer `unavailable` fast while it is down, /healthz says
// degraded, sending resumes without restarting imserver, and nothing
// answered `unavailable` is stored. On either store: on PostgreSQL the
// seq blocks' bounds are persisted in its transactions.
func TestRedisDownAndBack(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		redisDownAndBack(t, filepath.Join(t.TempDir(), "down.db"))
	})
	t.Run("postgres", func(t *testing.T) {
		redisDownAndBack(t, testPostgres(t).NewDB(t))
	})
}

func redisDownAndBack(t *testing.T, db string) {
	r := startRedis(t)
	dir := t.TempDir()
	p := startLogged(t, "A", db, redisConfig(t, dir, r))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	alice, bob := registerUser(t, p, "alice"), registerUser(t, p, "bob")
	group := newGroup(t, p, alice, bob)
	ws := dialWS(t, ctx, p, "alice", alice.Token)

	snd := startSenders(p, alice.Token, ws, group, 20*time.Millisecond)
	waitCount := func(what string, timeout time.Duration, n int, pred func(sendResult) bool) {
		t.Helper()
		defer func() {
			if t.Failed() {
				ws.mu.Lock()
				t.Logf("alice's socket: frames %v, closed %v %v, other frames %q", ws.frames, ws.closed, ws.closeErr, ws.other)
				ws.mu.Unlock()
			}
		}()
		snd.waitCount(t, what, timeout, n, pred)
	}
	waitCount("sends before the outage", 30*time.Second, 300, sendResult.ok)
	killedAt := time.Now()
	r.kill()
	t.Logf("redis-server killed")
	unavailable := func(res sendResult) bool { return res.Code == "unavailable" && (res.Status == 503 || res.Status == 0) }
	waitCount("`unavailable` answers after the kill", 10*time.Second, 20, func(res sendResult) bool {
		return unavailable(res) && res.Start.After(killedAt)
	})
	t.Logf("20 `unavailable` answers %v after the kill", time.Since(killedAt).Round(time.Millisecond))
	// Both transports must have answered unavailable.
	for _, pfx := range []string{"http-", "ws-"} {
		pfx := pfx
		waitCount(pfx+" `unavailable` answers", 10*time.Second, 1, func(res sendResult) bool {
			return unavailable(res) && strings.HasPrefix(res.ID, pfx)
		})
	}
	var hc int
	var h healthOut
	deadline := time.Now().Add(10 * time.Second)
	for {
		var err error
		hc, h, err = health(p)
		if err == nil && hc == 503 && h.Status == "degraded" {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("/healthz while Redis is down: %d %+v %v, want 503 degraded", hc, h, err)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("/healthz while Redis is down (%v after the kill): %d %+v", time.Since(killedAt).Round(time.Millisecond), hc, h)
	time.Sleep(2 * time.Second) // more sends while down
	restartAt := time.Now()
	r.restart()
	t.Logf("redis-server restarted (empty), %v after the kill", restartAt.Sub(killedAt).Round(time.Millisecond))
	waitCount("sends after Redis came back", 30*time.Second, 200, func(res sendResult) bool {
		return res.ok() && res.Start.After(restartAt)
	})
	results := snd.halt()
	deadline = time.Now().Add(10 * time.Second)
	for {
		hc, h, err := health(p)
		if err == nil && hc == 200 && h.Status == "ok" {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("/healthz after Redis came back: %d %+v %v, want 200 ok", hc, h, err)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if closed, err := ws.isClosed(); closed {
		t.Errorf("the sender's socket was closed during the outage: %v", err)
	}

	// Classify the answers. Redis is certainly down from the first
	// `unavailable` answer to the restart.
	var firstUnav time.Time
	for _, res := range results {
		if unavailable(res) && (firstUnav.IsZero() || res.End.Before(firstUnav)) {
			firstUnav = res.End
		}
	}
	var okBefore, okAfter, unav []sendResult
	other := map[string]int{}
	var slowest sendResult
	var sentWhileDown []sendResult
	for _, res := range results {
		if d := res.End.Sub(res.Start); d > slowest.End.Sub(slowest.Start) {
			slowest = res
		}
		switch {
		case res.ok():
			if res.Dup {
				t.Errorf("%s: answered duplicate although its client_msg_id is new", res.ID)
			}
			if res.End.Before(killedAt) {
				okBefore = append(okBefore, res)
			}
			if res.Start.After(restartAt) {
				okAfter = append(okAfter, res)
			}
			if !firstUnav.IsZero() && res.Start.After(firstUnav) && res.End.Before(restartAt) {
				sentWhileDown = append(sentWhileDown, res)
			}
		case unavailable(res):
			unav = append(unav, res)
		default:
			other[fmt.Sprintf("status %d code %q err %v", res.Status, res.Code, res.Err)]++
		}
	}
	t.Logf("%d sends: %d ok before the kill, %d ok after the restart, %d unavailable; slowest answer %v (%s, status %d %q)",
		len(results), len(okBefore), len(okAfter), len(unav), slowest.End.Sub(slowest.Start).Round(time.Millisecond), slowest.ID, slowest.Status, slowest.Code)
	// When did answers become fast? (go-redis dial retries make the first
	// ones after the kill slower.)
	var fastFrom time.Duration = -1
	for _, res := range results {
		if unavailable(res) && res.End.Sub(res.Start) < 200*time.Millisecond {
			fastFrom = res.Start.Sub(killedAt)
			break
		}
	}
	t.Logf("`unavailable` answers under 200ms from %v after the kill", fastFrom.Round(time.Millisecond))
	defer func() {
		if !t.Failed() {
			return
		}
		var tl []string
		for _, res := range results {
			if res.End.After(killedAt) && res.Start.Before(restartAt.Add(time.Second)) {
				tl = append(tl, fmt.Sprintf("%s %v..%v %d %q %v", res.ID, res.Start.Sub(killedAt).Round(time.Millisecond), res.End.Sub(killedAt).Round(time.Millisecond), res.Status, res.Code, res.Err))
			}
		}
		t.Logf("sends around the outage (times since the kill):\n%s", lastLines(strings.Join(tl, "\n"), 80))
	}()
	if len(unav) > 0 {
		ds := make([]time.Duration, 0, len(unav))
		for _, res := range unav {
			ds = append(ds, res.End.Sub(res.Start))
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		t.Logf("`unavailable` answer latency: min %v, median %v, p90 %v, max %v",
			ds[0].Round(time.Millisecond), ds[len(ds)/2].Round(time.Millisecond), ds[len(ds)*9/10].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond))
	}
	for k, n := range other {
		t.Errorf("%d sends answered neither success nor unavailable: %s", n, k)
	}
	if d := slowest.End.Sub(slowest.Start); d > 5*time.Second {
		t.Errorf("a send took %v to answer (%s: status %d %q); want within a few seconds", d, slowest.ID, slowest.Status, slowest.Code)
	}
	if len(sentWhileDown) > 0 {
		t.Errorf("%d sends started after the first `unavailable` answer and answered before Redis came back succeeded (first %s seq %d); want unavailable",
			len(sentWhileDown), sentWhileDown[0].ID, sentWhileDown[0].Seq)
	}
	if hi, lo := maxSeqOf(okBefore), minSeqOf(okAfter); lo <= hi {
		t.Errorf("a seq after the outage (%d) is not above every seq before it (%d)", lo, hi)
	}

	checkRealtimeOrder(t, "down and back", results)

	// Nothing answered unavailable is stored. Retry half of them with the
	// same client_msg_id: each is stored now, once (201, not a duplicate).
	stored := fetchAll(t, p.proc, alice.Token, group)
	byID := checkStored(t, "group", stored, results)
	for _, res := range unav {
		if m, ok := byID[res.ID]; ok {
			t.Errorf("%s was answered unavailable but is stored (seq %d)", res.ID, m.Seq)
		}
	}
	var retried []sendResult
	for i, res := range unav {
		if i%2 == 1 {
			continue
		}
		rr := httpSend(p, alice.Token, group, res.ID, "retry")
		if rr.Status != 201 || rr.Dup {
			t.Errorf("retry of %s (answered unavailable): status %d dup %v code %q err %v; want 201, not a duplicate", res.ID, rr.Status, rr.Dup, rr.Code, rr.Err)
		}
		retried = append(retried, rr)
	}
	stored = fetchAll(t, p.proc, alice.Token, group)
	byID = checkStored(t, "group after retries", stored, append(append([]sendResult(nil), results...), retried...))
	wantStored := len(retried)
	for _, res := range results {
		if res.ok() {
			wantStored++
		}
	}
	if len(byID) != wantStored {
		t.Errorf("%d messages stored, want %d (answered ok + retried)", len(byID), wantStored)
	}
	for i, res := range unav {
		if m, ok := byID[res.ID]; ok && i%2 == 1 {
			t.Errorf("%s was answered unavailable and not retried, but is stored (seq %d)", res.ID, m.Seq)
		}
	}
	// A later send still works and goes above everything.
	last := httpSend(p, alice.Token, group, "final", "x")
	if !last.ok() || last.Seq <= stored[len(stored)-1].Seq {
		t.Errorf("final send: status %d seq %d, want 201 above %d", last.Status, last.Seq, stored[len(stored)-1].Seq)
	}
}

// TestRedisTwoProcesses runs two imserver processes on one db file and one
// Redis: concurrent senders on both, live delivery across processes exactly
// once, identical stored lists from both, and membership changes and logouts
// made through one process taking effect on the other's sockets.
func TestRedisTwoProcesses(t *testing.T) {
	pair := startRedisPair(t, "two.db")
	r, a, b := pair.r, pair.a, pair.b
	procs := map[string]*lproc{"A": a, "B": b}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	u := map[string]rUser{}
	for i, name := range []string{"u0", "u1", "u2", "u3", "k", "j", "l"} {
		u[name] = registerUser(t, []*lproc{a, b}[i%2], name)
	}
	group := newGroup(t, a, u["u0"], u["u1"], u["u2"], u["u3"], u["k"], u["l"])

	// Sessions: the senders' own sockets, a second socket of u0 on B (gets
	// u0's own messages), plain receivers on each side, and the kicked
	// user k on B.
	s0 := dialWS(t, ctx, a, "u0@A (sender)", u["u0"].Token)
	s2 := dialWS(t, ctx, b, "u2@B (sender)", u["u2"].Token)
	sessions := []*wsClient{
		s0, s2,
		dialWS(t, ctx, b, "u0@B", u["u0"].Token),
		dialWS(t, ctx, a, "u1@A", u["u1"].Token),
		dialWS(t, ctx, b, "u3@B", u["u3"].Token),
		dialWS(t, ctx, a, "u2@A", u["u2"].Token),
	}
	kB := dialWS(t, ctx, b, "k@B", u["k"].Token)
	sessions = append(sessions, kB)

	// Phase 1: concurrent senders on both processes, over the socket and
	// over HTTP.
	const wsN, httpN = 400, 100
	var mu sync.Mutex
	var results []sendResult
	var wg sync.WaitGroup
	// A FLUSHALL in the middle of it: both processes reload the allocator.
	wg.Add(1)
	go func() {
		defer wg.Done()
		if !s0.waitFor(60*time.Second, func() bool { return len(s0.answers) >= wsN/3 }) {
			t.Errorf("phase 1 did not get going")
			return
		}
		if _, err := r.command("FLUSHALL"); err != nil {
			t.Errorf("FLUSHALL: %v", err)
		}
	}()
	for _, s := range []struct {
		ws   *wsClient
		name string
	}{{s0, "u0A"}, {s2, "u2B"}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var msgs [][2]string
			for i := range wsN {
				msgs = append(msgs, [2]string{group, fmt.Sprintf("%s-%d", s.name, i)})
			}
			rs := s.ws.pipeline(t, msgs, 32, 60*time.Second)
			mu.Lock()
			results = append(results, rs...)
			mu.Unlock()
		}()
	}
	for _, h := range []struct {
		p    *lproc
		user string
		name string
	}{{b, "u1", "u1B-http"}, {a, "u3", "u3A-http"}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range httpN {
				res := httpSend(h.p, u[h.user].Token, group, fmt.Sprintf("%s-%d", h.name, i), "x")
				mu.Lock()
				results = append(results, res)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	requireAllOK(t, "phase 1", results, 2*wsN+2*httpN)
	checkRealtimeOrder(t, "phase 1", results)
	if t.Failed() {
		t.FailNow()
	}
	sentOn := map[string]*wsClient{} // id -> the session that sent it
	for i := range wsN {
		sentOn[fmt.Sprintf("u0A-%d", i)] = s0
		sentOn[fmt.Sprintf("u2B-%d", i)] = s2
	}

	// Stored: identical from both processes, strictly increasing, all there.
	var lists [2][]storedMsg
	for i, name := range []string{"A", "B"} {
		lists[i] = fetchAll(t, procs[name].proc, u["u1"].Token, group)
		byID := checkStored(t, "stored via "+name, lists[i], results)
		if len(byID) != len(results) {
			t.Errorf("via %s: %d messages stored, %d sent", name, len(byID), len(results))
		}
	}
	if len(lists[0]) != len(lists[1]) {
		t.Errorf("A lists %d messages, B lists %d", len(lists[0]), len(lists[1]))
	} else {
		for i := range lists[0] {
			if lists[0][i] != lists[1][i] {
				t.Errorf("message %d differs: A %+v, B %+v", i, lists[0][i], lists[1][i])
				break
			}
		}
	}
	bound := lists[0][len(lists[0])-1].Seq

	// origin is the process a message was sent through, from its id.
	origin := func(id string) string {
		switch {
		case strings.HasPrefix(id, "u0A-"), strings.HasPrefix(id, "u3A-"), strings.HasPrefix(id, "p2-u1-"), strings.HasPrefix(id, "p3-u1-"):
			return "A"
		case strings.HasPrefix(id, "u2B-"), strings.HasPrefix(id, "u1B-"), strings.HasPrefix(id, "p2-u3-"), strings.HasPrefix(id, "p3-u3-"):
			return "B"
		}
		return "?"
	}
	// Live delivery: every session got every message it did not send
	// itself, exactly once, with the stored seq. Across processes the live
	// order may differ from seq order (clients sync on a gap); within one
	// origin it may not.
	seqOf := map[string]int64{}
	for _, m := range lists[0] {
		seqOf[m.ClientMsgID] = m.Seq
	}
	expect := func(w *wsClient) int {
		n := 0
		for _, res := range results {
			if sentOn[res.ID] != w {
				n++
			}
		}
		return n
	}
	checkLive := func(label string, w *wsClient, want func(id string) bool, n int) {
		t.Helper()
		got := map[string]int{}
		w.waitFor(30*time.Second, func() bool {
			clear(got)
			for _, m := range w.live {
				if m.Conv == group && want(m.ClientMsgID) {
					got[m.ClientMsgID]++
				}
			}
			return len(got) >= n
		})
		time.Sleep(300 * time.Millisecond) // room for late duplicates
		live := w.liveCopy()
		clear(got)
		outOfOrder := 0
		var last int64
		lastFrom := map[string]rMsg{} // process the message was sent through -> last seen
		for _, m := range live {
			if m.Conv != group || !want(m.ClientMsgID) {
				continue
			}
			got[m.ClientMsgID]++
			if s, ok := seqOf[m.ClientMsgID]; ok && s != m.Seq {
				t.Errorf("%s, %s: live seq %d, stored %d", label, w.name, m.Seq, s)
			}
			if m.Seq < last {
				outOfOrder++
			}
			last = max(last, m.Seq)
			// Within the messages sent through one process, live order
			// follows seq order (issue 5).
			o := origin(m.ClientMsgID)
			if o == "?" {
				t.Fatalf("test bug: no origin for %s", m.ClientMsgID)
			}
			if prev, ok := lastFrom[o]; ok && m.Seq < prev.Seq {
				t.Errorf("%s, %s: %s (seq %d) arrived after %s (seq %d), both sent through %s", label, w.name, m.ClientMsgID, m.Seq, prev.ClientMsgID, prev.Seq, o)
			}
			lastFrom[o] = m
		}
		dups := 0
		for _, c := range got {
			if c > 1 {
				dups++
			}
		}
		w.mu.Lock()
		frames, other, closed, closeErr := fmt.Sprint(w.frames), w.other, w.closed, w.closeErr
		w.mu.Unlock()
		t.Logf("%s, %s: %d of %d messages live, %d out of seq order; frames %s", label, w.name, len(got), n, outOfOrder, frames)
		if len(got) != n {
			missing := []string{}
			for _, res := range results {
				if sentOn[res.ID] != w && want(res.ID) && got[res.ID] == 0 && len(missing) < 5 {
					missing = append(missing, res.ID)
				}
			}
			t.Errorf("%s, %s: received %d distinct messages live, want %d (missing e.g. %v; closed %v %v; other frames %v)",
				label, w.name, len(got), n, missing, closed, closeErr, other)
		}
		if dups > 0 {
			t.Errorf("%s, %s: %d messages received more than once", label, w.name, dups)
		}
	}
	phase1 := map[string]bool{}
	for _, res := range results {
		phase1[res.ID] = true
	}
	for _, w := range sessions {
		checkLive("phase 1", w, func(id string) bool { return phase1[id] && sentOn[id] != w }, expect(w))
	}

	// Membership changes through A. j's socket on B is open before j is
	// added; k is kicked (its socket on B stays open).
	jB := dialWS(t, ctx, b, "j@B", u["j"].Token)
	if code := a.do(t, "POST", "/api/v1/conversations/"+group+"/members", u["u0"].Token, map[string]any{"user_ids": []string{u["j"].ID}}, nil); code != 200 {
		t.Fatalf("add j through A: %d", code)
	}
	if code := a.do(t, "DELETE", "/api/v1/conversations/"+group+"/members/"+u["k"].ID, u["u0"].Token, nil, nil); code != 204 {
		t.Fatalf("kick k through A: %d", code)
	}
	// Phase 2: sends through both processes after the change.
	var phase2 []sendResult
	for i := range 30 {
		for _, h := range []struct {
			p    *lproc
			user string
		}{{a, "u1"}, {b, "u3"}} {
			phase2 = append(phase2, httpSend(h.p, u[h.user].Token, group, fmt.Sprintf("p2-%s-%d", h.user, i), "x"))
		}
	}
	requireAllOK(t, "phase 2", phase2, 60)
	isPhase2 := map[string]bool{}
	for _, res := range phase2 {
		isPhase2[res.ID] = true
		if res.Seq <= bound {
			t.Errorf("phase 2 message %s has seq %d, not above phase 1's %d", res.ID, res.Seq, bound)
		}
	}
	results = append(results, phase2...)
	lists[0] = fetchAll(t, a.proc, u["u1"].Token, group)
	for _, m := range lists[0] {
		seqOf[m.ClientMsgID] = m.Seq
	}
	checkStored(t, "after phase 2", lists[0], results)
	// The joined member's socket on B gets phase 2 live; so do the others.
	checkLive("phase 2", jB, func(id string) bool { return isPhase2[id] }, len(phase2))
	for _, w := range sessions {
		if w == kB {
			continue
		}
		checkLive("phase 2", w, func(id string) bool { return isPhase2[id] }, len(phase2))
	}
	// The kicked user's socket on B gets nothing after the kick.
	time.Sleep(time.Second)
	for _, m := range kB.liveCopy() {
		if m.Conv == group && (isPhase2[m.ClientMsgID] || m.Seq > bound) {
			t.Errorf("k, kicked through A, received %s (seq %d > kick bound %d) live on B", m.ClientMsgID, m.Seq, bound)
		}
	}
	// Nor through a pull from B.
	var page struct {
		Messages []storedMsg `json:"messages"`
	}
	if code := b.do(t, "GET", fmt.Sprintf("/api/v1/conversations/%s/messages?after_seq=%d&limit=1000", group, bound), u["k"].Token, nil, &page); code != 200 || len(page.Messages) != 0 {
		t.Errorf("k, kicked through A, pulls after the bound from B: %d, %d messages; want 200 and none", code, len(page.Messages))
	}
	kB.mu.Lock()
	t.Logf("k@B frames after the kick: %v, other %v", kB.frames, kB.other)
	kB.mu.Unlock()

	// Logout through A closes the token's socket on B, and the token stops
	// working on B.
	lB := dialWS(t, ctx, b, "l@B", u["l"].Token)
	lA := dialWS(t, ctx, a, "l@A", u["l"].Token)
	if code := a.do(t, "POST", "/api/v1/auth/logout", u["l"].Token, nil, nil); code != 204 {
		t.Fatalf("logout through A: %d", code)
	}
	for _, w := range []*wsClient{lA, lB} {
		if !w.waitFor(10*time.Second, func() bool { return w.closed }) {
			t.Errorf("%s: socket still open 10s after its token logged out through A", w.name)
		} else {
			_, err := w.isClosed()
			t.Logf("%s closed: %v (status %v)", w.name, err, websocket.CloseStatus(err))
		}
	}
	if code := b.do(t, "GET", "/api/v1/me", u["l"].Token, nil, nil); code != 401 {
		t.Errorf("token logged out through A, used on B: %d, want 401", code)
	}

	// Phase 3: Redis crashes and comes back empty. Both processes recover
	// without a restart: sends work, seqs stay above everything before,
	// and live delivery across processes resumes (the bus resubscribes).
	r.restart()
	for name, p := range procs {
		deadline := time.Now().Add(20 * time.Second)
		for {
			code, h, err := health(p)
			if code == 200 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("/healthz of %s after the Redis restart: %d %+v %v", name, code, h, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// Let a moment pass for pub/sub to resubscribe: messages sent before
	// it may reach other processes' sockets only by sync; the contract is
	// about live delivery once things are back.
	time.Sleep(2 * time.Second)
	var phase3 []sendResult
	for i := range 20 {
		for _, h := range []struct {
			p    *lproc
			user string
		}{{a, "u1"}, {b, "u3"}} {
			id := fmt.Sprintf("p3-%s-%d", h.user, i)
			var res sendResult
			for range 50 { // retry (same client_msg_id) while Redis is coming back
				res = httpSend(h.p, u[h.user].Token, group, id, "x")
				if res.Code != "unavailable" {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			phase3 = append(phase3, res)
		}
	}
	requireAllOK(t, "phase 3", phase3, 40)
	isPhase3 := map[string]bool{}
	for _, res := range phase3 {
		isPhase3[res.ID] = true
	}
	if lo, hi := minSeqOf(phase3), maxSeqOf(results); lo <= hi {
		t.Errorf("after the Redis restart a seq (%d) is not above the earlier ones (%d)", lo, hi)
	}
	results = append(results, phase3...)
	checkRealtimeOrder(t, "all phases", results)
	for i, name := range []string{"A", "B"} {
		lists[i] = fetchAll(t, procs[name].proc, u["u1"].Token, group)
		checkStored(t, "after phase 3, via "+name, lists[i], results)
	}
	if fmt.Sprint(lists[0]) != fmt.Sprint(lists[1]) {
		t.Errorf("after phase 3 A and B list different messages (%d and %d)", len(lists[0]), len(lists[1]))
	}
	for _, m := range lists[0] {
		seqOf[m.ClientMsgID] = m.Seq
	}
	for _, w := range append([]*wsClient{jB}, sessions...) {
		if w == kB {
			continue
		}
		checkLive("after the Redis restart", w, func(id string) bool { return isPhase3[id] }, len(phase3))
	}

	// Both processes are still healthy, and the seqs in Redis never went
	// below what is stored.
	for name, p := range procs {
		if code, h, err := health(p); code != 200 {
			t.Errorf("/healthz of %s: %d %+v %v", name, code, h, err)
		}
	}
	seqs := make([]int64, 0, len(lists[0]))
	for _, m := range lists[0] {
		seqs = append(seqs, m.Seq)
	}
	if !sort.SliceIsSorted(seqs, func(i, j int) bool { return seqs[i] < seqs[j] }) {
		t.Errorf("stored seqs not sorted")
	}
}

// TestRedisStormAcrossProcesses: with the storm window in Redis, a group
// storming because of sends through process A is a storm for its members
// connected to process B too: they get the storm frames (PROTOCOL.md: "sent
// to every online member"), start and end.
func TestRedisStormAcrossProcesses(t *testing.T) {
	r := startRedis(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "storm.db")
	cfg := writeConfig(t, dir, fmt.Sprintf(`redis: %s
limits:
  send_rate: 1000000
  send_burst: 1000000
storm:
  threshold: 20
  lower_mark: 5
  window: 2s
  flush_interval: 100ms
`, r.url()))
	a := startLogged(t, "A", db, cfg)
	b := startLogged(t, "B", db, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sender, onA, onB := registerUser(t, a, "sender"), registerUser(t, a, "ona"), registerUser(t, b, "onb")
	group := newGroup(t, a, sender, onA, onB)
	wA := dialWS(t, ctx, a, "ona@A", onA.Token)
	wB := dialWS(t, ctx, b, "onb@B", onB.Token)

	var rs []sendResult
	for i := range 60 { // all through A
		rs = append(rs, httpSend(a, sender.Token, group, fmt.Sprintf("m%d", i), "x"))
	}
	requireAllOK(t, "sends", rs, 60)
	for _, w := range []*wsClient{wA, wB} {
		// Start, then the end once the 2s window empties (within a second
		// of it).
		if !w.waitFor(15*time.Second, func() bool { return len(w.storms) >= 2 }) {
			w.mu.Lock()
			t.Errorf("%s: storm frames %v within 15s of 60 sends through A (threshold 20 in 2s); want a start and an end", w.name, w.storms)
			w.mu.Unlock()
			continue
		}
		w.mu.Lock()
		if !w.storms[0] || w.storms[1] {
			t.Errorf("%s: storm frames %v, want [true false]", w.name, w.storms)
		}
		w.mu.Unlock()
	}
	for _, w := range []*wsClient{wA, wB} {
		got := map[string]bool{}
		for _, m := range w.liveCopy() {
			got[m.ClientMsgID] = true
		}
		w.mu.Lock()
		t.Logf("%s: %d of 60 messages live, frames %v, storm frames %v", w.name, len(got), w.frames, w.storms)
		w.mu.Unlock()
		if len(got) != 60 {
			t.Errorf("%s: %d of 60 messages live", w.name, len(got))
		}
	}
}

// TestRedisMembershipChangeReachesOtherProcess: a kick or a logout made
// through process A takes effect on process B, which has the group's members
// cached: right after the change (B checks a send right after A answered),
// and when the change was made while Redis was down (so no pub/sub message
// could carry it) and Redis is back.
func TestRedisMembershipChangeReachesOtherProcess(t *testing.T) {
	r := startRedis(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "members.db")
	cfg := redisConfig(t, dir, r)
	a := startLogged(t, "A", db, cfg)
	b := startLogged(t, "B", db, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	owner := registerUser(t, a, "owner")
	const n = 20
	var ks []rUser
	for i := range n {
		ks = append(ks, registerUser(t, a, fmt.Sprintf("k%d", i)))
	}
	kl, lo := registerUser(t, a, "kl"), registerUser(t, a, "lo")
	group := newGroup(t, a, owner, append(append([]rUser(nil), ks...), kl, lo)...)
	seq := 0
	ownerSendsOnB := func() sendResult {
		t.Helper()
		seq++
		res := httpSend(b, owner.Token, group, fmt.Sprintf("owner-%d", seq), "x")
		if !res.ok() {
			t.Fatalf("owner's send through B: %d %q %v", res.Status, res.Code, res.Err)
		}
		return res
	}

	// 1. Right after the change.
	var accepted []string
	for i, k := range ks {
		ownerSendsOnB() // B has the roster cached
		if code := a.do(t, "DELETE", "/api/v1/conversations/"+group+"/members/"+k.ID, owner.Token, nil, nil); code != 204 {
			t.Fatalf("kick k%d through A: %d", i, code)
		}
		res := httpSend(b, k.Token, group, fmt.Sprintf("after-kick-%d", i), "x")
		switch {
		case res.ok():
			accepted = append(accepted, fmt.Sprintf("k%d (seq %d)", i, res.Seq))
		case res.Status != 403 || res.Code != "not_member":
			t.Errorf("k%d, kicked through A, sends through B: %d %q %v; want 403 not_member", i, res.Status, res.Code, res.Err)
		}
	}
	if len(accepted) > 0 {
		t.Errorf("%d of %d users kicked through A could still send through B right after the kick was answered: %v", len(accepted), n, accepted)
	}

	// 2. Changes made while Redis is down.
	ownerSendsOnB()
	klB := dialWS(t, ctx, b, "kl@B", kl.Token)
	loB := dialWS(t, ctx, b, "lo@B", lo.Token)
	r.kill()
	kickCode := a.do(t, "DELETE", "/api/v1/conversations/"+group+"/members/"+kl.ID, owner.Token, nil, nil)
	logoutCode := a.do(t, "POST", "/api/v1/auth/logout", lo.Token, nil, nil)
	t.Logf("while Redis is down: kick through A %d, logout through A %d", kickCode, logoutCode)
	// Stay down past the publisher's timeout (2s), so that no late retry
	// carries the change once Redis is back.
	time.Sleep(4 * time.Second)
	r.restart()
	for _, p := range []*lproc{a, b} {
		deadline := time.Now().Add(20 * time.Second)
		for {
			if code, _, _ := health(p); code == 200 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("/healthz did not come back")
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	time.Sleep(2 * time.Second) // room for any resubscribe or resync
	if kickCode == 204 {
		res := httpSend(b, kl.Token, group, "kl-after-kick", "x")
		if res.ok() {
			t.Errorf("kl, kicked through A while Redis was down, sends through B after Redis is back: %d (seq %d); want 403 not_member", res.Status, res.Seq)
		} else if res.Status != 403 || res.Code != "not_member" {
			t.Errorf("kl, kicked through A while Redis was down, sends through B: %d %q %v; want 403 not_member", res.Status, res.Code, res.Err)
		}
		last := ownerSendsOnB()
		time.Sleep(time.Second)
		for _, m := range klB.liveCopy() {
			if m.Seq >= last.Seq {
				t.Errorf("kl, kicked through A while Redis was down, received %s (seq %d) live on B after Redis was back", m.ClientMsgID, m.Seq)
			}
		}
	} else if kickCode != 503 {
		t.Errorf("kick through A while Redis is down: %d, want 204 or 503", kickCode)
	}
	if logoutCode == 204 {
		if !loB.waitFor(5*time.Second, func() bool { return loB.closed }) {
			t.Errorf("lo logged out through A while Redis was down: its socket on B is still open 5s after Redis came back")
			last := ownerSendsOnB()
			if loB.waitFor(3*time.Second, func() bool {
				for _, m := range loB.live {
					if m.Seq == last.Seq {
						return true
					}
				}
				return false
			}) {
				t.Errorf("... and it still receives new messages (%s)", last.ID)
			}
		}
		if code := b.do(t, "GET", "/api/v1/me", lo.Token, nil, nil); code != 401 {
			t.Errorf("lo's token, logged out through A while Redis was down, on B: %d, want 401", code)
		}
	} else if logoutCode != 503 {
		t.Errorf("logout through A while Redis is down: %d, want 204 or 503", logoutCode)
	}
}
