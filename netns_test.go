package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/imserver/imserver/internal/pgtest"
)

// The three-node test: PostgreSQL and Redis in a namespace of their own
// ("hub", holding a bridge), one imserver node in each of three more, each
// linked to the bridge by a veth pair, and the test's clients in the root
// namespace, linked to the bridge too. Nodes really are apart: separate
// network stacks, reached only through the links the test can cut.

// netlab is the namespaces and links of one test.
type netlab struct {
	t      *testing.T
	prefix string // of every namespace and interface name
	subnet string // "10.213.N."
	hub    string
	nodes  []string
}

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// newNetlab makes the namespaces, or skips the test saying why it cannot.
func newNetlab(t *testing.T, nodes int) *netlab {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("the ip command (iproute2) is missing: cannot create network namespaces")
	}
	n := os.Getpid() % 200
	l := &netlab{t: t, prefix: fmt.Sprintf("ims%d", os.Getpid()%100000), subnet: fmt.Sprintf("10.213.%d.", n+20)}
	l.hub = l.prefix + "h"
	if err := ipCmd("netns", "add", l.hub); err != nil {
		t.Skipf("cannot create network namespaces (root and CAP_SYS_ADMIN are needed): %v", err)
	}
	t.Cleanup(l.cleanup)
	must := func(args ...string) {
		t.Helper()
		if err := ipCmd(args...); err != nil {
			t.Fatal(err)
		}
	}
	must("-n", l.hub, "link", "set", "lo", "up")
	must("-n", l.hub, "link", "add", "br0", "type", "bridge")
	must("-n", l.hub, "addr", "add", l.subnet+"1/24", "dev", "br0")
	must("-n", l.hub, "link", "set", "br0", "up")
	// The root namespace's link, for the clients.
	root, rootPeer := l.prefix+"r", l.prefix+"rb"
	must("link", "add", root, "type", "veth", "peer", "name", rootPeer)
	must("link", "set", rootPeer, "netns", l.hub)
	must("-n", l.hub, "link", "set", rootPeer, "master", "br0", "up")
	must("addr", "add", l.subnet+"2/24", "dev", root)
	must("link", "set", root, "up")
	for i := range nodes {
		ns := fmt.Sprintf("%sn%d", l.prefix, i)
		must("netns", "add", ns)
		l.nodes = append(l.nodes, ns)
		must("-n", ns, "link", "set", "lo", "up")
		v, peer := fmt.Sprintf("%sv%d", l.prefix, i), fmt.Sprintf("%sb%d", l.prefix, i)
		must("link", "add", v, "type", "veth", "peer", "name", peer)
		must("link", "set", v, "netns", ns)
		must("link", "set", peer, "netns", l.hub)
		must("-n", l.hub, "link", "set", peer, "master", "br0", "up")
		must("-n", ns, "addr", "add", l.nodeIP(i)+"/24", "dev", v)
		must("-n", ns, "link", "set", v, "up")
	}
	return l
}

func (l *netlab) hubIP() string       { return l.subnet + "1" }
func (l *netlab) nodeIP(i int) string { return fmt.Sprintf("%s%d", l.subnet, 10+i) }

// setLink cuts (up false) or restores node i's link.
func (l *netlab) setLink(i int, up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	return ipCmd("-n", l.nodes[i], "link", "set", fmt.Sprintf("%sv%d", l.prefix, i), state)
}

// cleanup deletes what newNetlab made, also after a failure: deleting a
// namespace deletes its ends of the veth pairs, and with them the pairs.
func (l *netlab) cleanup() {
	for _, ns := range l.nodes {
		ipCmd("netns", "del", ns)
	}
	ipCmd("netns", "del", l.hub)
	ipCmd("link", "del", l.prefix+"r")
}

// startIn runs name in namespace ns; the process is killed when the test
// ends. ip netns exec execs, so the pid is the program's.
func (l *netlab) startIn(ns, name string, logs io.Writer, args ...string) (*exec.Cmd, chan struct{}) {
	l.t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns, name}, args...)...)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		l.t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	l.t.Cleanup(func() { cmd.Process.Kill(); <-exited })
	return cmd, exited
}

// nsStormThreshold puts the test's group into storm mode under its load
// (its messages then travel as storm batches on the bus). A storm batch
// published while a node's link is cut used to reach the other nodes twice
// when the Redis client retried the PUBLISH; publishes are numbered per
// node since and receivers drop what they saw (TestRedisBusRetryDeliversOnce).
const nsStormThreshold = 100

// nsNode is one imserver node of the test.
type nsNode struct {
	i      int
	base   string
	cmd    *exec.Cmd
	exited chan struct{}
	logs   *syncBuffer
}

// Node 1's link is cut for cutFor; in the last cutTail of it, after the
// writer's idle-transaction timeout (5 s) freed whatever node 1 held,
// node 2 must ack at least minAckedDuringCut sends.
const (
	cutFor            = 9 * time.Second
	cutTail           = 3 * time.Second
	minAckedDuringCut = 20
)

// TestThreeNodesInNamespaces runs three imserver nodes on one PostgreSQL
// and one Redis, each node in a network namespace of its own, sends
// through all three under load, kills one node with SIGKILL and cuts
// another's link for a few seconds. Every acked message must be stored
// once, with its acked seq, in seq order; every member must end up with
// every message exactly once (live or by sync), its live stream never
// repeating a seq; the killed node's clients reconnect to another node and
// catch up.
func TestThreeNodesInNamespaces(t *testing.T) {
	l := newNetlab(t, 3)
	pg, err := pgtest.StartIn(l.hub, l.hubIP())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("postgres log:\n%s", lastLines(pg.Log(), 30))
		}
		pg.Stop()
	})
	dir := t.TempDir()
	redisLogs := &syncBuffer{}
	l.startIn(l.hub, "redis-server", redisLogs, "--port", "6379", "--bind", l.hubIP(), "--protected-mode", "no",
		"--save", "", "--appendonly", "no", "--dir", dir, "--loglevel", "warning")
	cfg := writeConfig(t, dir, fmt.Sprintf(`redis: redis://%s:6379/0
limits:
  send_rate: 1000000
  send_burst: 1000000
websocket:
  session_queue: 100000
postgres:
  batch_timeout: 3s
storm:
  threshold: %d
`, l.hubIP(), nsStormThreshold))
	url := pg.URL("postgres")
	var nodes []*nsNode
	for i := range l.nodes {
		n := &nsNode{i: i, base: fmt.Sprintf("http://%s:8080", l.nodeIP(i)), logs: &syncBuffer{}}
		n.cmd, n.exited = l.startIn(l.nodes[i], serverBin, n.logs, "serve", "--addr", l.nodeIP(i)+":8080", "--db", url, "--config", cfg)
		nodes = append(nodes, n)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range nodes {
				t.Logf("node %d output:\n%s", n.i, lastLines(n.logs.String(), 40))
			}
			t.Logf("redis output:\n%s", redisLogs.String())
		}
	})
	for _, n := range nodes {
		waitHealthy(t, n)
	}

	// Users homed two per node, one group of all of them.
	const perNode = 2
	type member struct {
		name, id, token string
		home            int
	}
	var members []*member
	for i := range len(nodes) * perNode {
		m := &member{name: fmt.Sprint("user", i), home: i % len(nodes)}
		var out struct {
			Token string `json:"token"`
			User  struct {
				ID string `json:"id"`
			} `json:"user"`
		}
		if code := doJSON(nodes[m.home].base, "POST", "/api/v1/auth/register", "", map[string]string{"username": m.name, "password": "password123"}, &out); code != 201 {
			t.Fatalf("register %s: %d", m.name, code)
		}
		m.id, m.token = out.User.ID, out.Token
		members = append(members, m)
	}
	var ids []string
	for _, m := range members[1:] {
		ids = append(ids, m.id)
	}
	var conv struct {
		Conversation struct {
			ID string `json:"id"`
		} `json:"conversation"`
	}
	if code := doJSON(nodes[0].base, "POST", "/api/v1/groups", members[0].token, map[string]any{"name": "g", "member_ids": ids}, &conv); code != 201 {
		t.Fatalf("create group: %d", code)
	}
	group := conv.Conversation.ID

	// Node health as the clients see it: a node is skipped once it failed
	// to answer, for a moment.
	var down [3]atomic.Int64 // unix ms until which node i is avoided
	pick := func(home int) int {
		now := time.Now().UnixMilli()
		for k := range len(nodes) {
			i := (home + k) % len(nodes)
			if down[i].Load() < now {
				return i
			}
		}
		return home
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Receivers: one WebSocket session per member, reconnecting to another
	// node when its own fails.
	recvs := make([]*nsReceiver, len(members))
	var rwg sync.WaitGroup
	for i, m := range members {
		r := &nsReceiver{name: m.name, token: m.token, conv: group, seen: map[int64]int{}}
		recvs[i] = r
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			r.run(ctx, func() (int, string) { i := pick(m.home); return i, nodes[i].base }, func(i int) {
				down[i].Store(time.Now().Add(2 * time.Second).UnixMilli())
			})
		}()
	}
	for _, r := range recvs {
		if !r.waitConnected(20 * time.Second) {
			t.Fatalf("%s never connected", r.name)
		}
	}

	// Senders: every member sends through its node with a few requests in
	// flight, retrying a failed send (same client_msg_id) through another
	// node until it is answered.
	const each, inflight = 150, 4
	var (
		mu     sync.Mutex
		acked  = map[string]int64{}
		errs   = map[string]int{}
		swg    sync.WaitGroup
		sentN  atomic.Int64
		client = &http.Client{Timeout: 2 * time.Second}
	)
	for _, m := range members {
		for w := range inflight {
			swg.Add(1)
			go func() {
				defer swg.Done()
				for k := w; k < each; k += inflight {
					id := fmt.Sprintf("%s-%d", m.name, k)
					for attempt := 0; ; attempt++ {
						if ctx.Err() != nil {
							return
						}
						i := pick(m.home)
						seq, code, err := sendVia(client, nodes[i].base, m.token, group, id)
						if err == nil && code == "" {
							mu.Lock()
							if prev, ok := acked[id]; ok && prev != seq {
								t.Errorf("%s acked twice with seqs %d and %d", id, prev, seq)
							}
							acked[id] = seq
							mu.Unlock()
							sentN.Add(1)
							break
						}
						mu.Lock()
						if err != nil {
							errs["transport"]++
							down[i].Store(time.Now().Add(time.Second).UnixMilli())
						} else {
							errs[code]++
						}
						mu.Unlock()
						if code != "" && code != "unavailable" {
							t.Errorf("send %s via node %d: %s", id, i, code)
							return
						}
						time.Sleep(100 * time.Millisecond)
					}
				}
			}()
		}
	}

	// Faults, once a third is sent: SIGKILL node 0; then cut node 1's link
	// for cutFor.
	total := int64(len(members) * each)
	for sentN.Load() < total/3 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	killedAt := time.Now()
	if err := nodes[0].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-nodes[0].exited
	t.Logf("node 0 killed after %d acked sends", sentN.Load())
	for sentN.Load() < total/2 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	if err := l.setLink(1, false); err != nil {
		t.Fatal(err)
	}
	cutAt := sentN.Load()
	t.Logf("node 1 cut off after %d acked sends", cutAt)
	time.Sleep(cutFor - cutTail)
	tailFrom := sentN.Load()
	time.Sleep(cutTail)
	inTail := sentN.Load() - tailFrom
	if err := l.setLink(1, true); err != nil {
		t.Fatal(err)
	}
	t.Logf("node 1 back after %d acked sends (%d while it was cut off, %d in the last %v)", sentN.Load(), sentN.Load()-cutAt, inTail, cutTail)
	// The cut node may have been inside a batch, holding the group's row:
	// PostgreSQL ends its session after the writer's
	// idle_in_transaction_session_timeout (5 s) and node 2 takes the sends
	// again, instead of every node waiting out the cut.
	if inTail < minAckedDuringCut && sentN.Load() < total {
		t.Errorf("%d sends acked in the last %v of node 1's cut, want at least %d: node 2 stalled behind it", inTail, cutTail, minAckedDuringCut)
	}
	swg.Wait()
	if t.Failed() {
		return
	}
	mu.Lock()
	t.Logf("%d messages acked; failed attempts: %v", len(acked), errs)
	mu.Unlock()
	if len(acked) != int(total) {
		t.Fatalf("%d acked, want %d", len(acked), total)
	}

	// Stored: each acked message once, with its seq, seqs increasing.
	stored := fetchGroup(t, nodes[2].base, members[0].token, group)
	byID := map[string]int64{}
	for i, m := range stored {
		if i > 0 && m.Seq <= stored[i-1].Seq {
			t.Fatalf("stored seq %d follows %d", m.Seq, stored[i-1].Seq)
		}
		if _, dup := byID[m.ClientMsgID]; dup {
			t.Fatalf("%s stored twice", m.ClientMsgID)
		}
		byID[m.ClientMsgID] = m.Seq
	}
	for id, seq := range acked {
		if byID[id] != seq {
			t.Errorf("%s acked with seq %d, stored with %d", id, seq, byID[id])
		}
	}
	if len(byID) != len(acked) {
		t.Errorf("%d stored, %d acked", len(byID), len(acked))
	}
	storedSeqs := map[int64]bool{}
	for _, m := range stored {
		storedSeqs[m.Seq] = true
	}

	// Delivered: live, then the sync a client does after reconnecting or
	// at the end; nothing twice in one live stream, nothing missing.
	for _, r := range recvs {
		r.waitFor(5*time.Second, func() bool { return len(r.seen) >= len(stored) })
	}
	cancel()
	rwg.Wait()
	for idx, r := range recvs {
		r.mu.Lock()
		live := len(r.seen)
		for i, rep := range r.repeats {
			if i < 5 {
				t.Errorf("%s: delivered live twice in one session: %s", r.name, rep)
			}
		}
		for seq := range r.seen {
			if !storedSeqs[seq] {
				t.Errorf("%s: got seq %d live, which is not stored", r.name, seq)
			}
		}
		if r.backwards > 0 {
			t.Logf("%s: %d live messages arrived after a larger seq (nodes publish independently; clients order by seq)", r.name, r.backwards)
		}
		have := map[int64]bool{}
		for s := range r.seen {
			have[s] = true
		}
		synced := 0
		for _, m := range fetchGroup(t, nodes[2].base, members[idx].token, group) {
			if !have[m.Seq] {
				have[m.Seq] = true
				synced++
			}
		}
		if len(have) != len(storedSeqs) {
			t.Errorf("%s ends with %d messages, %d are stored", r.name, len(have), len(storedSeqs))
		}
		if members[idx].home == 0 && (r.sessions < 2 || len(r.catchUps) == 0) {
			t.Errorf("%s, a client of the killed node, did not reconnect and catch up: %d sessions, catch-ups %v", r.name, r.sessions, r.catchUps)
		}
		// Issue 16's budget: a killed node's clients are back on another
		// node and caught up within 2 s of losing their session.
		if members[idx].home == 0 && slices.Max(append([]time.Duration{0}, r.catchUps...)) > catchUpBudget {
			t.Errorf("%s, a client of the killed node, caught up in %v; budget %v", r.name, r.catchUps, catchUpBudget)
		}
		t.Logf("%s: %d sessions, %d held before the final sync (%d live again in a later session), %d by the final sync; catch-up after reconnects: %v",
			r.name, r.sessions, live, r.across, synced, r.catchUps)
		r.mu.Unlock()
	}
	t.Logf("killed at %s", killedAt.Format(time.StampMilli))
}

// catchUpBudget is how long a client of a killed node may take to
// reconnect to another node and pull what it missed (issue 16).
const catchUpBudget = 2 * time.Second

// nsReceiver is a member's client: one WebSocket session at a time, which
// after a failure reconnects (to another node if its own does not answer)
// and pulls what it missed (the protocol's sync).
type nsReceiver struct {
	name, token, conv string

	mu        sync.Mutex
	seen      map[int64]int // seq -> live deliveries over all sessions (0: synced)
	session   map[int64]int // seq -> live deliveries in the current session
	repeats   []string      // seqs delivered twice live in one session
	across    int           // live deliveries of a seq held from an earlier session
	sessions  int
	backwards int
	last      int64 // largest seq held
	catchUps  []time.Duration
	changed   chan struct{}
}

func (r *nsReceiver) notify() {
	if r.changed != nil {
		close(r.changed)
	}
	r.changed = make(chan struct{})
}

func (r *nsReceiver) waitConnected(d time.Duration) bool {
	return r.waitFor(d, func() bool { return r.sessions > 0 })
}

func (r *nsReceiver) waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		if r.changed == nil {
			r.notify()
		}
		ok, ch := cond(), r.changed
		r.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-time.After(100 * time.Millisecond):
		}
	}
	return false
}

func (r *nsReceiver) run(ctx context.Context, pick func() (int, string), failed func(int)) {
	var lostAt time.Time
	for ctx.Err() == nil {
		i, base := pick()
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		c, _, err := websocket.Dial(dctx, "ws"+strings.TrimPrefix(base, "http")+"/api/v1/ws?token="+r.token, nil)
		cancel()
		if err != nil {
			failed(i)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		c.SetReadLimit(-1)
		r.mu.Lock()
		r.sessions++
		r.session = map[int64]int{}
		r.notify()
		r.mu.Unlock()
		if !lostAt.IsZero() {
			// Catch up: pull from the last seq held, as a client does after
			// reconnecting; live frames meanwhile count too.
			if r.pull(ctx, base) == nil {
				r.mu.Lock()
				r.catchUps = append(r.catchUps, time.Since(lostAt).Round(time.Millisecond))
				r.mu.Unlock()
			}
		}
		r.read(ctx, c)
		c.CloseNow()
		failed(i)
		lostAt = time.Now()
	}
}

// read records live messages until the session fails. A silent link (cut)
// is noticed by a ping that is not answered.
func (r *nsReceiver) read(ctx context.Context, c *websocket.Conn) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for sctx.Err() == nil {
			pctx, pcancel := context.WithTimeout(sctx, 2*time.Second)
			err := c.Ping(pctx)
			pcancel()
			if err != nil {
				cancel()
				return
			}
			select {
			case <-sctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	for {
		_, data, err := c.Read(sctx)
		if err != nil {
			return
		}
		var f struct {
			Type     string          `json:"type"`
			Message  json.RawMessage `json:"message"`
			Messages []rMsg          `json:"messages"`
		}
		if json.Unmarshal(data, &f) != nil {
			continue
		}
		var ms []rMsg
		switch f.Type {
		case "msg":
			var m rMsg
			if json.Unmarshal(f.Message, &m) == nil {
				ms = append(ms, m)
			}
		case "batch":
			ms = f.Messages
		}
		r.mu.Lock()
		for _, m := range ms {
			if m.Conv != r.conv {
				continue
			}
			if m.Seq < r.last {
				r.backwards++
			}
			if r.session[m.Seq]++; r.session[m.Seq] > 1 {
				r.repeats = append(r.repeats, fmt.Sprintf("seq %d (%s) in session %d", m.Seq, f.Type, r.sessions))
			} else if _, ok := r.seen[m.Seq]; ok {
				r.across++
			}
			r.seen[m.Seq]++
			r.last = max(r.last, m.Seq)
		}
		r.notify()
		r.mu.Unlock()
	}
}

// pull fetches the messages after the largest seq held.
func (r *nsReceiver) pull(ctx context.Context, base string) error {
	client := &http.Client{Timeout: 2 * time.Second}
	r.mu.Lock()
	after := r.last
	r.mu.Unlock()
	for {
		req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/api/v1/conversations/%s/messages?after_seq=%d&limit=1000", base, r.conv, after), nil)
		req.Header.Set("Authorization", "Bearer "+r.token)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		var page struct {
			Messages  []storedMsg `json:"messages"`
			Completed bool        `json:"completed"`
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil {
			return err
		}
		r.mu.Lock()
		for _, m := range page.Messages {
			// Synced, not live: counted as held without a live delivery.
			if _, ok := r.seen[m.Seq]; !ok {
				r.seen[m.Seq] = 0
			}
			r.last = max(r.last, m.Seq)
			after = m.Seq
		}
		r.notify()
		r.mu.Unlock()
		if page.Completed || len(page.Messages) == 0 {
			return nil
		}
	}
}

func waitHealthy(t *testing.T, n *nsNode) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-n.exited:
			t.Fatalf("node %d exited at start:\n%s", n.i, n.logs.String())
		default:
		}
		if resp, err := http.Get(n.base + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("node %d not healthy:\n%s", n.i, n.logs.String())
}

func doJSON(base, method, path, token string, body, out any) int {
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(method, base+path, bytes.NewReader(b))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	if out != nil {
		json.NewDecoder(resp.Body).Decode(out)
	}
	return resp.StatusCode
}

// sendVia sends one message over HTTP: its seq, or the error code, or a
// transport error.
func sendVia(c *http.Client, base, token, conv, id string) (int64, string, error) {
	b, _ := json.Marshal(map[string]string{"client_msg_id": id, "body": "x"})
	req, _ := http.NewRequest("POST", base+"/api/v1/conversations/"+conv+"/messages", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var out struct {
		Message rMsg `json:"message"`
		Error   *struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return 0, "", fmt.Errorf("status %d: %v", resp.StatusCode, err)
	}
	if out.Error != nil {
		return 0, out.Error.Code, nil
	}
	return out.Message.Seq, "", nil
}

func fetchGroup(t *testing.T, base, token, conv string) []storedMsg {
	t.Helper()
	var all []storedMsg
	after := int64(0)
	for {
		var page struct {
			Messages  []storedMsg `json:"messages"`
			Completed bool        `json:"completed"`
		}
		if code := doJSON(base, "GET", fmt.Sprintf("/api/v1/conversations/%s/messages?after_seq=%d&limit=1000", conv, after), token, nil, &page); code != 200 {
			t.Fatalf("messages: %d", code)
		}
		all = append(all, page.Messages...)
		if page.Completed || len(page.Messages) == 0 {
			sort.Slice(all, func(i, j int) bool { return all[i].Seq < all[j].Seq })
			return all
		}
		after = page.Messages[len(page.Messages)-1].Seq
	}
}
