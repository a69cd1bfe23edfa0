package seq

import (
	"context"
	"sync"
	"time"
)

// SharedWindow counts a key's events over all the processes sharing a
// Redis without a round trip per event. Each process counts its own events
// at once, exactly (a LocalWindow), and every interval sends what it
// recorded meanwhile to the shared RedisWindow in one pipeline (one script
// call per key, all its events at once), reading back each key's count
// over every process. Record answers the shared count of the last
// exchange plus this process's events since: the other processes' newest
// events reach it at most one interval late, and events that left the
// window meanwhile at most one interval late too. That is what storm
// detection needs (a threshold over a minute), for a fraction of the cost:
// a script call per send was a tenth of a node's CPU with three nodes.
//
// While Redis fails, the exchange is dropped and Record answers this
// process's own exact count (onFallback hears of it once per failure), as
// FallbackWindow does; the next exchange that works shares again.
type SharedWindow struct {
	redis      *RedisWindow
	local      *LocalWindow
	window     time.Duration
	limit      int
	onFallback func(error)

	mu      sync.Mutex
	pending map[string][]int64    // events not yet sent, by key
	shared  map[string]sharedSeen // each key's count at the last exchange
	down    bool                  // the last exchange failed

	flushMu sync.Mutex // one exchange at a time
	stop    chan struct{}
	done    chan struct{}
}

type sharedSeen struct {
	n  int
	at time.Time // when it was read
}

// NewSharedWindow starts a SharedWindow over the RedisWindow r, exchanging
// every interval; Close stops it.
func NewSharedWindow(r *RedisWindow, interval time.Duration, onFallback func(error)) *SharedWindow {
	w := &SharedWindow{
		redis:      r,
		local:      NewLocalWindow(time.Duration(r.window), r.limit),
		window:     time.Duration(r.window),
		limit:      r.limit,
		onFallback: onFallback,
		pending:    make(map[string][]int64),
		shared:     make(map[string]sharedSeen),
		stop:       make(chan struct{}),
		done:       make(chan struct{}),
	}
	go w.loop(interval)
	return w
}

// Limit returns the largest count Record and Count report.
func (w *SharedWindow) Limit() int { return w.limit }

// Close stops the exchanges after a last one.
func (w *SharedWindow) Close() {
	close(w.stop)
	<-w.done
}

func (w *SharedWindow) loop(interval time.Duration) {
	defer close(w.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			w.Flush(context.Background())
		case <-w.stop:
			w.Flush(context.Background())
			return
		}
	}
}

// Record implements Window. It never waits for Redis and never fails.
func (w *SharedWindow) Record(ctx context.Context, key string, now time.Time) (int, error) {
	own, _ := w.local.Record(ctx, key, now)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pending[key] = append(w.pending[key], now.UnixNano())
	return w.estimateLocked(key, own, now), nil
}

// Count implements Window: the shared count read now, with this process's
// events not sent yet; this process's own count if Redis fails, and
// without asking it while the last exchange failed (as Record): the storm
// monitor counts its groups one after the other, and an unreachable Redis
// would hold each count for its whole timeout.
func (w *SharedWindow) Count(ctx context.Context, key string, now time.Time) (int, error) {
	own, _ := w.local.Count(ctx, key, now)
	w.mu.Lock()
	down := w.down
	w.mu.Unlock()
	if down {
		return own, nil
	}
	n, err := w.redis.Count(ctx, key, now)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		return own, nil
	}
	return min(max(n+len(w.pending[key]), own), w.limit), nil
}

func (w *SharedWindow) estimateLocked(key string, own int, now time.Time) int {
	s, ok := w.shared[key]
	if w.down || !ok || now.Sub(s.at) > w.window {
		return own
	}
	return min(max(s.n+len(w.pending[key]), own), w.limit)
}

// Flush sends the events recorded since the last exchange and reads back
// every sent key's shared count (the loop calls it every interval).
func (w *SharedWindow) Flush(ctx context.Context) {
	w.flushMu.Lock()
	defer w.flushMu.Unlock()
	w.mu.Lock()
	batch := w.pending
	if len(batch) == 0 {
		down := w.down
		w.mu.Unlock()
		if down && w.redis.rdb.Ping(ctx).Err() == nil {
			// Nothing to send, but Count asks Redis again.
			w.mu.Lock()
			w.down = false
			w.mu.Unlock()
		}
		return
	}
	w.pending = make(map[string][]int64, len(batch))
	w.mu.Unlock()

	keys := make([]string, 0, len(batch))
	for k := range batch {
		keys = append(keys, k)
	}
	counts, err := w.redis.recordMany(ctx, keys, batch)
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		if !w.down && w.onFallback != nil {
			w.onFallback(err)
		}
		w.down = true
		clear(w.shared)
		return
	}
	w.down = false
	for i, k := range keys {
		w.shared[k] = sharedSeen{n: counts[i], at: now}
	}
	if len(w.shared) > 4*len(keys)+64 {
		for k, s := range w.shared {
			if now.Sub(s.at) > w.window {
				delete(w.shared, k)
			}
		}
	}
}
