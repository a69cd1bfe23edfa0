package bench

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// run is the state of one scenario against one server.
type run struct {
	opts  Options
	sizes Sizes
	name  string
	api   *apiClient
	// nodes are the servers sessions connect to, round robin by session
	// id (--url a,b,c); nodes[0] is api, which also takes the setup.
	nodes  []*apiClient
	wsHTTP *http.Client
	epoch  time.Time

	ledger     *ledger
	latency    histogram // send → live delivery
	ackLatency histogram // send → sent
	stats      stats
	stopping   atomic.Bool
	mix        bool // the team mix is on
	meas       measure
	serverPID  int // 0 when unknown

	users    []*benchUser
	groups   []*group
	sessions []*session

	firstSend atomic.Int64 // ns since epoch, 0 until the first send
	lastSent  atomic.Int64 // ns since epoch of the last `sent`

	mu         sync.Mutex
	phase      string
	deviations map[string]int
	sendErrors map[string]int
	notes      map[string]int
}

type stats struct {
	attempted, confirmed, retries           atomic.Int64
	liveDeliveries, received, viaPull       atomic.Int64
	duplicated, orderViolations, foreign    atomic.Int64
	resyncs, syncChains, syncPages, storms  atomic.Int64
	batchFrames, errorFrames, unknownFrames atomic.Int64
	typing                                  atomic.Int64 // typing frames received (--typists)
	disconnects, reconnects, seqClashes     atomic.Int64
	finalPulls                              atomic.Int64
	reordered                               atomic.Int64 // live seqs below one held, from several nodes
}

func newRun(name string, o Options, sz Sizes, api *apiClient) *run {
	return &run{
		opts: o, sizes: sz, name: name, api: api, nodes: []*apiClient{api}, mix: o.Mix == "team" || (o.Mix == "" && name == "mixed"),
		wsHTTP:     &http.Client{Transport: newWSTransport()},
		epoch:      time.Now(),
		ledger:     newLedger(),
		deviations: map[string]int{}, sendErrors: map[string]int{}, notes: map[string]int{},
	}
}

// node is the server session id connects to.
func (r *run) node(id int) *apiClient {
	if id < 0 {
		id = -id
	}
	return r.nodes[id%len(r.nodes)]
}

// now is the time since the run's epoch; bodies carry it, so latency needs
// no wall clock.
func (r *run) now() time.Duration { return time.Since(r.epoch) }

func (r *run) setPhase(p string) {
	r.mu.Lock()
	r.phase = p
	r.mu.Unlock()
}

func (r *run) getPhase() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.phase
}

// deviation records an answer that breaks PROTOCOL.md.
func (r *run) deviation(msg string) {
	r.mu.Lock()
	if len(r.deviations) < 50 || r.deviations[msg] > 0 {
		r.deviations[msg]++
	}
	r.mu.Unlock()
}

func (r *run) sendError(code string) {
	r.mu.Lock()
	r.sendErrors[code]++
	r.mu.Unlock()
}

func (r *run) note(kind, msg string) {
	r.mu.Lock()
	if len(r.notes) < 20 {
		r.notes[msg]++
	} else {
		r.notes[kind+" (more)"]++
	}
	r.mu.Unlock()
}

func (r *run) markSent(now time.Duration) {
	for {
		v := r.lastSent.Load()
		if int64(now) <= v || r.lastSent.CompareAndSwap(v, int64(now)) {
			return
		}
	}
}

// sendPlan says who sends how much where.
type sendPlan struct {
	senders  []*session
	total    int           // messages over all senders; 0 = until duration
	rate     float64       // messages/s over all senders; 0 = flat out
	duration time.Duration // 0 = until total
	// pick chooses the conversation of a sender's k-th message; nil = round robin.
	pick func(s *session, k int) *recvState
}

// runSenders sends the plan and waits until every send is answered (or
// nothing moves for the drain timeout).
func (r *run) runSenders(ctx context.Context, p sendPlan) {
	if len(p.senders) == 0 {
		return
	}
	start := r.now()
	r.firstSend.CompareAndSwap(0, int64(start))
	var wg sync.WaitGroup
	for i, s := range p.senders {
		n := -1
		if p.total > 0 {
			n = p.total / len(p.senders)
			if i < p.total%len(p.senders) {
				n++
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.sendLoop(ctx, s, n, p, start)
		}()
	}
	wg.Wait()
	r.waitFor(ctx, "answers to sends", func() int64 {
		n := 0
		for _, s := range p.senders {
			n += s.inflight()
		}
		return int64(n)
	}, r.stats.confirmed.Load)
}

// maxSendBatch bounds the sends a sender writes at once.
const maxSendBatch = 64

func (r *run) sendLoop(ctx context.Context, s *session, n int, p sendPlan, start time.Duration) {
	if len(s.convList) == 0 {
		return
	}
	var interval time.Duration
	if p.rate > 0 {
		interval = time.Duration(float64(time.Second) * float64(len(p.senders)) / p.rate)
	}
	// Spread the senders' phases so paced sends do not arrive in bursts.
	offset := interval * time.Duration(s.id%max(1, len(p.senders))) / time.Duration(max(1, len(p.senders)))
	// due is when the k-th send is due: open loop, late or not.
	due := func(k int) time.Duration { return start + offset + time.Duration(k)*interval }
	pick := func(k int) *recvState {
		if p.pick != nil {
			return p.pick(s, k)
		}
		return s.convList[k%len(s.convList)]
	}
	batch := make([]*recvState, 0, maxSendBatch)
	for k := 0; n < 0 || k < n; {
		if ctx.Err() != nil || r.stopping.Load() {
			return
		}
		if p.duration > 0 && r.now()-start >= p.duration {
			return
		}
		if interval > 0 {
			if d := due(k) - r.now(); d > 0 {
				time.Sleep(d)
			}
		}
		if err := s.acquire(ctx); err != nil {
			return
		}
		// Every further send that is due and has a free window slot goes
		// with this one: the same sends at the same moments as one at a
		// time, in one write.
		batch = append(batch[:0], pick(k))
		now := r.now()
		for len(batch) < maxSendBatch && (n < 0 || k+len(batch) < n) &&
			(interval == 0 || due(k+len(batch)) <= now) && s.tryAcquire() {
			batch = append(batch, pick(k+len(batch)))
		}
		if err := s.sendBatch(batch, r.opts.body()); err != nil {
			return
		}
		k += len(batch)
	}
}

// waitFor waits until remaining() is 0, giving up when progress() has not
// moved for the drain timeout.
func (r *run) waitFor(ctx context.Context, what string, remaining, progress func() int64) bool {
	return r.waitStall(ctx, what, r.opts.DrainTimeout, remaining, progress)
}

func (r *run) waitStall(ctx context.Context, what string, stall time.Duration, remaining, progress func() int64) bool {
	last, since := progress(), time.Now()
	for ctx.Err() == nil {
		if remaining() <= 0 {
			return true
		}
		time.Sleep(20 * time.Millisecond)
		if p := progress(); p != last {
			last, since = p, time.Now()
		} else if time.Since(since) > stall {
			if what != "" {
				r.note("timeout", fmt.Sprintf("gave up waiting for %s: %d outstanding after %s without progress", what, remaining(), stall))
			}
			return false
		}
	}
	return false
}

// expectedTotal is how many (session, message) deliveries the ledger calls
// for: every confirmed message of a member's conversations, except the
// session's own sends.
func (r *run) expectedTotal() int64 {
	var n int64
	for _, s := range r.sessions {
		s.mu.Lock()
		for _, st := range s.convList {
			n += int64(r.ledger.get(st.conv).count - st.own)
		}
		s.mu.Unlock()
	}
	return n
}

// drain waits until every online session holds what the ledger expects, then
// fills the gaps left by cut live streams (resync) with one more pull each,
// as PROTOCOL.md lets a client do before it calls a missing seq a hole.
func (r *run) drain(ctx context.Context) {
	r.setPhase("draining")
	want := r.expectedTotal()
	remaining := func() int64 {
		if n := want - r.stats.received.Load(); n > 0 {
			return n
		}
		for _, s := range r.sessions {
			if s.syncing() {
				return 1
			}
		}
		return 0
	}
	progress := func() int64 { return r.stats.received.Load() + r.stats.syncPages.Load() }
	// A cut live stream whose tail never resumed leaves a gap no later live
	// message reveals; after a short stall the final pull below fills it.
	stall := r.opts.DrainTimeout
	if r.stats.resyncs.Load() > 0 {
		stall = min(stall, time.Second)
	}
	if !r.waitStall(ctx, "", stall, remaining, progress) && stall == r.opts.DrainTimeout {
		r.note("timeout", fmt.Sprintf("gave up waiting for deliveries: %d outstanding after %s without progress", remaining(), stall))
	}
	pulled := false
	before := r.stats.received.Load()
	for _, s := range r.sessions {
		if !s.online() {
			continue
		}
		s.mu.Lock()
		for _, st := range s.convList {
			if !st.resynced {
				continue
			}
			if first := r.firstMissingLocked(s, st); first > 0 {
				s.startSyncFromLocked(st, first-1)
				pulled = true
			}
		}
		s.mu.Unlock()
	}
	if pulled {
		defer func() { r.stats.finalPulls.Add(r.stats.received.Load() - before) }()
		r.waitFor(ctx, "final pulls", func() int64 {
			for _, s := range r.sessions {
				if s.syncing() {
					return 1
				}
			}
			return 0
		}, r.stats.syncPages.Load)
	}
}

// firstMissingLocked is the smallest seq the session should hold but lacks, or 0.
func (r *run) firstMissingLocked(s *session, st *recvState) int64 {
	l := r.ledger.get(st.conv)
	for seq := int64(1); seq < int64(len(l.senders)); seq++ {
		if snd := l.senders[seq]; snd != 0 && int(snd) != s.id+1 && !st.have.has(seq) {
			return seq
		}
	}
	return 0
}

// account compares what every session holds with the ledger.
func (r *run) account() Correctness {
	var c Correctness
	for _, s := range r.sessions {
		s.mu.Lock()
		for _, st := range s.convList {
			l := r.ledger.get(st.conv)
			for seq := int64(1); seq < int64(len(l.senders)); seq++ {
				snd := l.senders[seq]
				has := st.have.has(seq)
				switch {
				case snd == 0 || int(snd) == s.id+1:
					if has {
						c.Unexpected++ // unconfirmed, or the sender's own message echoed to it
					}
				case has:
					c.Expected++
					c.Received++
				default:
					c.Expected++
					c.Lost++
				}
			}
			for w := len(l.senders) >> 6; w < len(st.have); w++ {
				for b := 0; b < 64; b++ {
					if seq := int64(w<<6 + b); seq >= int64(len(l.senders)) && st.have.has(seq) {
						c.Unexpected++
					}
				}
			}
		}
		s.mu.Unlock()
	}
	c.Duplicated = r.stats.duplicated.Load()
	c.OrderViolations = r.stats.orderViolations.Load()
	c.Unexpected += r.stats.foreign.Load()
	c.SeqClashes = r.stats.seqClashes.Load()
	c.Unconfirmed = r.stats.attempted.Load() - r.stats.confirmed.Load() - int64(r.sendErrorCount())
	return c
}

func (r *run) sendErrorCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, v := range r.sendErrors {
		n += v
	}
	return n
}

// acker sends cumulative acks every second, as the protocol asks of clients.
func (r *run) acker(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var buf []byte
	var ends []int
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, s := range r.sessions {
			buf, ends = s.sendAcks(buf, ends)
		}
	}
}

// lastDelivery is when the last live delivery arrived, since the epoch.
func (r *run) lastDelivery() time.Duration {
	var m time.Duration
	for _, s := range r.sessions {
		s.mu.Lock()
		m = max(m, s.lastDeliv)
		s.mu.Unlock()
	}
	return m
}

func sortedCounts(m map[string]int) []Count {
	out := make([]Count, 0, len(m))
	for k, v := range m {
		out = append(out, Count{What: k, N: v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].N > out[j].N || out[i].N == out[j].N && out[i].What < out[j].What })
	return out
}
