package seq

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Queue holds best-effort events in fixed-length per-key queues.
//
// Entries older than the TTL (age > TTL) are discarded by Take; Len counts
// what is held, which may include expired entries no Take has met yet.
type Queue interface {
	// Push appends payload to key's queue, dropping the oldest entries past the capacity; it returns how many were dropped.
	Push(ctx context.Context, key string, payload []byte) (dropped int, err error)
	// Take removes and returns up to max of the oldest entries, skipping (and discarding) those older than the TTL.
	Take(ctx context.Context, key string, max int) ([][]byte, error)
	Len(ctx context.Context, key string) (int, error)
}

// LocalQueue is the in-process Queue. One mutex guards all keys: events are
// rare (alerts, webhooks), so contention is not worth sharding for.
type LocalQueue struct {
	capacity int
	ttl      time.Duration
	now      func() time.Time // a field so tests can move time

	mu     sync.Mutex
	queues map[string]*entryQueue
	pushes int // since the last sweep
}

type entry struct {
	at      time.Time
	payload []byte
}

// entryQueue is a FIFO over a slice: popping reslices from the front and
// append reallocates once the front has moved far enough, so memory stays
// within about twice the capacity.
type entryQueue struct {
	entries []entry
}

// NewLocalQueue returns a LocalQueue holding at most capacity entries per key
// for at most ttl each; ttl <= 0 keeps entries until taken or pushed out. It
// panics if capacity is not positive.
func NewLocalQueue(capacity int, ttl time.Duration) *LocalQueue {
	if capacity < 1 {
		panic(fmt.Sprintf("seq: NewLocalQueue(%d, %v): capacity must be positive", capacity, ttl))
	}
	return &LocalQueue{capacity: capacity, ttl: ttl, now: time.Now, queues: make(map[string]*entryQueue)}
}

// Push implements Queue. It copies payload, so the caller may reuse it.
func (q *LocalQueue) Push(_ context.Context, key string, payload []byte) (int, error) {
	now := q.now()
	q.mu.Lock()
	defer q.mu.Unlock()
	q.pushes++
	if q.ttl > 0 && q.pushes >= sweepInterval && q.pushes >= len(q.queues) {
		q.sweep(now)
	}
	eq := q.queues[key]
	if eq == nil {
		eq = &entryQueue{}
		q.queues[key] = eq
	}
	eq.entries = append(eq.entries, entry{at: now, payload: append([]byte(nil), payload...)})
	dropped := 0
	for len(eq.entries) > q.capacity {
		eq.pop()
		dropped++
	}
	return dropped, nil
}

// Take implements Queue.
func (q *LocalQueue) Take(_ context.Context, key string, max int) ([][]byte, error) {
	now := q.now()
	q.mu.Lock()
	defer q.mu.Unlock()
	eq := q.queues[key]
	if eq == nil || max <= 0 {
		return nil, nil
	}
	var out [][]byte
	for len(out) < max && len(eq.entries) > 0 {
		e := eq.pop()
		if !q.expired(e, now) {
			out = append(out, e.payload)
		}
	}
	if len(eq.entries) == 0 {
		delete(q.queues, key)
	}
	return out, nil
}

// Len implements Queue.
func (q *LocalQueue) Len(_ context.Context, key string) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if eq := q.queues[key]; eq != nil {
		return len(eq.entries), nil
	}
	return 0, nil
}

func (q *LocalQueue) expired(e entry, now time.Time) bool {
	return q.ttl > 0 && now.Sub(e.at) > q.ttl
}

// sweep drops the queues whose newest entry has expired, as the Redis key's
// TTL does, so that keys nobody takes from do not pile up.
func (q *LocalQueue) sweep(now time.Time) {
	for k, eq := range q.queues {
		if len(eq.entries) == 0 || q.expired(eq.entries[len(eq.entries)-1], now) {
			delete(q.queues, k)
		}
	}
	q.pushes = 0
}

func (eq *entryQueue) pop() entry {
	e := eq.entries[0]
	eq.entries[0] = entry{} // let the payload go
	eq.entries = eq.entries[1:]
	return e
}
