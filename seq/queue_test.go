package seq

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"
)

// fakeClock is moved by hand; the queues read it through their now field.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// newQueueFunc builds the queue under test with the given capacity and TTL,
// reading time from clock.
type newQueueFunc func(t *testing.T, capacity int, ttl time.Duration, clock *fakeClock) Queue

func newLocalQueueForTest(_ *testing.T, capacity int, ttl time.Duration, clock *fakeClock) Queue {
	q := NewLocalQueue(capacity, ttl)
	q.now = clock.now
	return q
}

func TestLocalQueue(t *testing.T) { testQueue(t, newLocalQueueForTest) }

// testQueue is the behaviour both Queue implementations share.
func testQueue(t *testing.T, newQueue newQueueFunc) {
	ctx := context.Background()
	p := func(i int) []byte { return fmt.Appendf(nil, "event %d", i) }
	push := func(t *testing.T, q Queue, key string, payload []byte, wantDropped int) {
		t.Helper()
		dropped, err := q.Push(ctx, key, payload)
		if err != nil || dropped != wantDropped {
			t.Fatalf("Push(%q, %q) = %d, %v; want %d dropped", key, payload, dropped, err, wantDropped)
		}
	}
	take := func(t *testing.T, q Queue, key string, max int, want ...[]byte) {
		t.Helper()
		got, err := q.Take(ctx, key, max)
		if err != nil {
			t.Fatalf("Take(%q, %d): %v", key, max, err)
		}
		if len(got) != len(want) {
			t.Fatalf("Take(%q, %d) = %q, want %q", key, max, got, want)
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("Take(%q, %d) = %q, want %q", key, max, got, want)
			}
		}
	}
	length := func(t *testing.T, q Queue, key string, want int) {
		t.Helper()
		if got, err := q.Len(ctx, key); err != nil || got != want {
			t.Fatalf("Len(%q) = %d, %v; want %d", key, got, err, want)
		}
	}

	t.Run("drops oldest past capacity", func(t *testing.T) {
		q := newQueue(t, 3, time.Minute, &fakeClock{base})
		for i := range 5 {
			dropped := 0
			if i >= 3 {
				dropped = 1
			}
			push(t, q, "k", p(i), dropped)
		}
		length(t, q, "k", 3)
		take(t, q, "k", 10, p(2), p(3), p(4))
		length(t, q, "k", 0)
		take(t, q, "k", 10)
	})

	t.Run("takes in batches", func(t *testing.T) {
		q := newQueue(t, 100, time.Minute, &fakeClock{base})
		for i := range 10 {
			push(t, q, "k", p(i), 0)
		}
		push(t, q, "other", p(99), 0)
		take(t, q, "k", 4, p(0), p(1), p(2), p(3))
		length(t, q, "k", 6)
		take(t, q, "k", 4, p(4), p(5), p(6), p(7))
		take(t, q, "k", 4, p(8), p(9))
		take(t, q, "k", 4)
		take(t, q, "k", 0)
		take(t, q, "other", 4, p(99))
	})

	t.Run("drops expired on take", func(t *testing.T) {
		clock := &fakeClock{base}
		q := newQueue(t, 100, 10*time.Second, clock)
		push(t, q, "k", p(0), 0) // base
		clock.advance(5 * time.Second)
		push(t, q, "k", p(1), 0) // base+5s
		push(t, q, "k", p(2), 0)
		clock.advance(4 * time.Second)
		push(t, q, "k", p(3), 0) // base+9s
		clock.advance(6 * time.Second)
		// At base+15s: p0 is 15s old, p1 and p2 exactly 10s (kept), p3 6s.
		length(t, q, "k", 4)
		take(t, q, "k", 2, p(1), p(2)) // the expired one does not use up max
		clock.advance(10 * time.Second)
		take(t, q, "k", 5)
		length(t, q, "k", 0)
	})

	t.Run("keeps everything without a TTL", func(t *testing.T) {
		clock := &fakeClock{base}
		q := newQueue(t, 2, 0, clock)
		push(t, q, "k", p(0), 0)
		clock.advance(1000 * time.Hour)
		take(t, q, "k", 5, p(0))
	})

	t.Run("payloads are opaque", func(t *testing.T) {
		q := newQueue(t, 10, time.Minute, &fakeClock{base})
		odd := [][]byte{{}, []byte("a|b|c"), {0, '|', 0xff, '\n'}, bytes.Repeat([]byte{'x'}, 1<<16)}
		for _, v := range odd {
			push(t, q, "k", v, 0)
		}
		take(t, q, "k", 10, odd...)
	})

	t.Run("push copies the payload", func(t *testing.T) {
		q := newQueue(t, 10, time.Minute, &fakeClock{base})
		buf := []byte("first")
		push(t, q, "k", buf, 0)
		copy(buf, "xxxxx")
		take(t, q, "k", 1, []byte("first"))
	})
}

func TestLocalQueueSweepsExpiredKeys(t *testing.T) {
	ctx := context.Background()
	clock := &fakeClock{base}
	q := NewLocalQueue(10, time.Second)
	q.now = clock.now
	for i := range 5000 {
		if _, err := q.Push(ctx, fmt.Sprintf("k%d", i), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	clock.advance(2 * time.Second)
	for range 2 * sweepInterval {
		if _, err := q.Push(ctx, "hot", []byte("y")); err != nil {
			t.Fatal(err)
		}
	}
	q.mu.Lock()
	n := len(q.queues)
	q.mu.Unlock()
	if n != 1 {
		t.Errorf("queues held = %d, want only the hot one", n)
	}
}
