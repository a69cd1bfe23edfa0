package seq

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestSharedWindowTwoProcesses: two processes' SharedWindows on one Redis
// count their own events at once and each other's after an exchange, in
// one pipeline per exchange whatever the number of events.
func TestSharedWindowTwoProcesses(t *testing.T) {
	ctx := context.Background()
	r := startRedis(t)
	redisA := NewRedisWindow(r.client(), "s:", time.Minute, 1000, time.Minute)
	redisB := NewRedisWindow(r.client(), "s:", time.Minute, 1000, time.Minute)
	a := NewSharedWindow(redisA, time.Hour, nil) // exchanges only when told
	b := NewSharedWindow(redisB, time.Hour, nil)
	defer a.Close()
	record := func(w *SharedWindow, want int) {
		t.Helper()
		got, err := w.Record(ctx, "g", time.Now())
		if err != nil || got != want {
			t.Fatalf("Record = %d, %v; want %d", got, err, want)
		}
	}
	for i := range 30 {
		record(a, i+1)
	}
	for i := range 20 {
		record(b, i+1) // A's events not exchanged yet
	}
	a.Flush(ctx)
	b.Flush(ctx)
	if p := redisA.pipelines.Load(); p > 2 {
		t.Errorf("A exchanged 30 events in %d round trips, want 1 (and one to load the script)", p)
	}
	if n, err := a.Count(ctx, "g", time.Now()); err != nil || n != 50 {
		t.Fatalf("A's Count = %d, %v; want 50", n, err)
	}
	record(b, 51) // B's exchange read A's 30
	record(a, 31) // A's did not see B's yet (A exchanged first)
	a.Flush(ctx)
	record(a, 52) // 50 + A's 31st, exchanged, + this one (B's 51st is not sent yet)
	b.Close()     // sends B's 51st
	if n := r.client().ZCard(ctx, "s:win:{g}").Val(); n != 52 {
		t.Errorf("Redis holds %d events, want 52", n)
	}
}

// TestSharedWindowRedisKilled: while Redis is down a process counts its own
// events (told once), and shares again once an exchange works; Close sends
// what is left.
func TestSharedWindowRedisKilled(t *testing.T) {
	ctx := context.Background()
	r := startRedis(t)
	var mu sync.Mutex
	var reported []error
	w := NewSharedWindow(NewRedisWindow(r.client(), "k:", time.Minute, 1000, time.Minute), time.Hour, func(err error) {
		mu.Lock()
		reported = append(reported, err)
		mu.Unlock()
	})
	for range 10 {
		w.Record(ctx, "g", time.Now())
	}
	w.Flush(ctx)
	r.kill()
	for i := range 10 {
		w.Record(ctx, "g", time.Now())
		w.Flush(ctx)
		if n, err := w.Record(ctx, "g", time.Now()); err != nil || n != 12+2*i {
			t.Fatalf("Record with Redis down = %d, %v; want this process's own %d", n, err, 12+2*i)
		}
	}
	mu.Lock()
	if len(reported) != 1 || !errors.Is(reported[0], ErrUnavailable) {
		t.Errorf("onFallback got %v, want one ErrUnavailable", reported)
	}
	mu.Unlock()
	r.restart() // empty
	// The client's pool redials a dead server about once a second; the
	// exchanges until then fail and their events are counted here only.
	shared := false
	for deadline := time.Now().Add(10 * time.Second); !shared && time.Now().Before(deadline); {
		w.Record(ctx, "h", time.Now())
		w.Flush(ctx)
		shared = r.client().ZCard(ctx, "k:win:{h}").Val() > 0
		time.Sleep(50 * time.Millisecond)
	}
	if !shared {
		t.Fatal("Redis back, but no exchange worked")
	}
	w.Close()
}

// TestSharedWindowExchangesByItself: the loop exchanges every interval.
func TestSharedWindowExchangesByItself(t *testing.T) {
	ctx := context.Background()
	r := startRedis(t)
	w := NewSharedWindow(NewRedisWindow(r.client(), "l:", time.Minute, 1000, time.Minute), 10*time.Millisecond, nil)
	defer w.Close()
	w.Record(ctx, "g", time.Now())
	deadline := time.Now().Add(5 * time.Second)
	for r.client().ZCard(ctx, "l:win:{g}").Val() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the event never reached Redis")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// callCounter counts the commands a redis client sends (or tries to).
type callCounter struct{ n atomic.Int64 }

func (c *callCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *callCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { c.n.Add(1); return next(ctx, cmd) }
}
func (c *callCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { c.n.Add(1); return next(ctx, cmds) }
}

// TestSharedWindowCountWhileDown: once an exchange has failed, Count
// answers this process's own count as Record does, without a call to
// Redis: the storm monitor counts every storming group in turn, and an
// unreachable Redis (a partition, not a refused connection) made each
// count wait for its whole timeout.
func TestSharedWindowCountWhileDown(t *testing.T) {
	ctx := context.Background()
	r := startRedis(t)
	c := r.client()
	calls := &callCounter{}
	c.AddHook(calls)
	w := NewSharedWindow(NewRedisWindow(c, "d:", time.Minute, 1000, time.Minute), time.Hour, nil)
	defer w.Close()
	for range 3 {
		w.Record(ctx, "g", time.Now())
	}
	w.Flush(ctx)
	r.kill()
	w.Record(ctx, "g", time.Now())
	w.Flush(ctx) // fails: down
	before := calls.n.Load()
	if n, err := w.Count(ctx, "g", time.Now()); err != nil || n != 4 {
		t.Fatalf("Count with Redis down = %d, %v; want this process's own 4", n, err)
	}
	if d := calls.n.Load() - before; d != 0 {
		t.Fatalf("Count with Redis down made %d calls to Redis, want none", d)
	}
	// Back: an exchange with nothing to send finds it, and Count reads
	// the shared count again.
	r.restart()
	for deadline := time.Now().Add(10 * time.Second); ; {
		w.Flush(ctx)
		before = calls.n.Load()
		if _, err := w.Count(ctx, "g", time.Now()); err != nil {
			t.Fatal(err)
		}
		if calls.n.Load() > before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Redis back, but Count never asks it again")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
