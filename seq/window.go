package seq

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"
)

// Window counts events per key over a sliding time window.
//
// Times passed for one key should not go backwards by more than scheduling
// jitter: implementations prune with the time they are given, so an event
// recorded with an earlier time than a previous call may be counted one call
// less than a brute-force count would. Events newer than now (recorded by a
// caller whose clock read came later) are counted.
type Window interface {
	// Record adds one event for key at now and returns how many events lie in (now-window, now],
	// exact up to Limit (threshold+1); above that it returns Limit.
	Record(ctx context.Context, key string, now time.Time) (int, error)
	// Count returns the same count without adding an event.
	Count(ctx context.Context, key string, now time.Time) (int, error)
}

// windowShards spreads keys over independent mutexes so that concurrent sends
// into different groups rarely contend.
const windowShards = 64

// sweepInterval is how many records (over all keys) pass between two looks at
// one shard for idle keys, taking the shards in turn. A shard is swept only if
// at least as many records passed since its last sweep as it holds keys, so
// sweeping costs O(1) amortised per record however many keys there are.
const sweepInterval = 1024

// LocalWindow is the exact in-process Window. Per key it keeps only the newest
// limit timestamps in a ring: once limit events are inside the window the
// count is capped anyway, so older ones can never matter again.
type LocalWindow struct {
	window  int64 // ns
	limit   int
	seed    maphash.Seed
	records atomic.Uint64
	shards  [windowShards]windowShard
}

type windowShard struct {
	mu        sync.Mutex
	rings     map[string]*tsRing
	lastSweep uint64 // LocalWindow.records when this shard was last swept
}

// NewLocalWindow returns a LocalWindow over window that counts exactly up to
// limit. It panics if window or limit is not positive.
func NewLocalWindow(window time.Duration, limit int) *LocalWindow {
	if window <= 0 || limit < 1 {
		panic(fmt.Sprintf("seq: NewLocalWindow(%v, %d): window and limit must be positive", window, limit))
	}
	w := &LocalWindow{window: int64(window), limit: limit, seed: maphash.MakeSeed()}
	for i := range w.shards {
		w.shards[i].rings = make(map[string]*tsRing)
	}
	return w
}

// Limit returns the largest count Record and Count report.
func (w *LocalWindow) Limit() int { return w.limit }

func (w *LocalWindow) shard(key string) *windowShard {
	return &w.shards[maphash.String(w.seed, key)%windowShards]
}

// Record implements Window. It never fails.
func (w *LocalWindow) Record(_ context.Context, key string, now time.Time) (int, error) {
	ts := now.UnixNano()
	cutoff := ts - w.window
	if n := w.records.Add(1); n%sweepInterval == 0 {
		// Before taking our own shard's lock: never hold two.
		w.shards[(n/sweepInterval)%windowShards].sweep(cutoff, n)
	}
	s := w.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rings[key]
	if r == nil {
		r = &tsRing{}
		s.rings[key] = r
	}
	r.prune(cutoff)
	r.insert(ts, w.limit)
	return r.n, nil
}

// Count implements Window. It never fails.
func (w *LocalWindow) Count(_ context.Context, key string, now time.Time) (int, error) {
	cutoff := now.UnixNano() - w.window
	s := w.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rings[key]
	if r == nil {
		return 0, nil
	}
	r.prune(cutoff)
	if r.n == 0 {
		delete(s.rings, key)
	}
	return r.n, nil
}

// sweep drops the keys whose newest event is at or before cutoff: their count
// is 0 and would be rebuilt from nothing on the next event anyway.
func (s *windowShard) sweep(cutoff int64, records uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if records-s.lastSweep < uint64(len(s.rings)) {
		return
	}
	s.lastSweep = records
	for k, r := range s.rings {
		if r.n == 0 || r.newest() <= cutoff {
			delete(s.rings, k)
		}
	}
}

// keys reports how many keys are held, for tests.
func (w *LocalWindow) keys() int {
	n := 0
	for i := range w.shards {
		s := &w.shards[i]
		s.mu.Lock()
		n += len(s.rings)
		s.mu.Unlock()
	}
	return n
}

// tsRing holds timestamps in ascending order in a circular buffer that grows
// up to the window's limit and shrinks again when the key calms down, so a
// quiet group costs a few words, not limit of them.
type tsRing struct {
	buf  []int64
	head int // index of the oldest
	n    int
}

const minRing = 4

func (r *tsRing) at(i int) int64 { return r.buf[(r.head+i)%len(r.buf)] }

func (r *tsRing) set(i int, v int64) { r.buf[(r.head+i)%len(r.buf)] = v }

func (r *tsRing) newest() int64 { return r.at(r.n - 1) }

// prune drops the timestamps at or before cutoff: the window is (now-window, now].
func (r *tsRing) prune(cutoff int64) {
	for r.n > 0 && r.buf[r.head] <= cutoff {
		r.head = (r.head + 1) % len(r.buf)
		r.n--
	}
	if len(r.buf) > minRing && r.n <= len(r.buf)/4 {
		r.resize(len(r.buf) / 2)
	}
}

// insert adds ts keeping the ring sorted and at most limit long. Times come
// nearly in order, so the backwards walk is O(1) in practice.
func (r *tsRing) insert(ts int64, limit int) {
	if r.n == limit {
		if ts < r.buf[r.head] {
			// Older than all limit kept events: it could only matter once
			// they expire, and by then it has expired too.
			return
		}
		r.head = (r.head + 1) % len(r.buf)
		r.n--
	}
	if r.n == len(r.buf) {
		r.resize(min(max(2*len(r.buf), minRing), limit))
	}
	i := r.n
	for i > 0 && r.at(i-1) > ts {
		r.set(i, r.at(i-1))
		i--
	}
	r.set(i, ts)
	r.n++
}

func (r *tsRing) resize(size int) {
	buf := make([]int64, size)
	for i := 0; i < r.n; i++ {
		buf[i] = r.at(i)
	}
	r.buf, r.head = buf, 0
}
