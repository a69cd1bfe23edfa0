package seq

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// flakyWindow fails while down is set, and counts the calls it answers.
type flakyWindow struct {
	mu    sync.Mutex
	down  bool
	calls int
	Window
}

func (f *flakyWindow) Record(ctx context.Context, key string, now time.Time) (int, error) {
	f.mu.Lock()
	down := f.down
	f.calls++
	f.mu.Unlock()
	if down {
		return 0, ErrUnavailable
	}
	return f.Window.Record(ctx, key, now)
}

func (f *flakyWindow) setDown(down bool) {
	f.mu.Lock()
	f.down = down
	f.mu.Unlock()
}

func TestFallbackWindowBackoff(t *testing.T) {
	ctx := context.Background()
	primary := &flakyWindow{Window: NewLocalWindow(time.Minute, 100)}
	fallback := NewLocalWindow(time.Minute, 100)
	var reported []error
	f := NewFallbackWindow(primary, fallback, func(err error) { reported = append(reported, err) })
	clock := base
	f.clock = func() time.Time { return clock }

	rec := func(want int) {
		t.Helper()
		got, err := f.Record(ctx, "g", base)
		if err != nil || got != want {
			t.Fatalf("Record = %d, %v; want %d", got, err, want)
		}
	}
	rec(1)
	rec(2)
	primary.setDown(true)
	rec(3) // from the fallback, which shadowed the first two
	if len(reported) != 1 || !errors.Is(reported[0], ErrUnavailable) {
		t.Fatalf("onFallback got %v, want one ErrUnavailable", reported)
	}
	calls := primary.calls
	rec(4)
	if primary.calls != calls {
		t.Error("primary tried again during the backoff")
	}
	primary.setDown(false)
	clock = clock.Add(defaultRetryAfter)
	rec(3) // the primary again: it missed the event counted locally
	if len(reported) != 1 {
		t.Errorf("onFallback called %d times, want 1", len(reported))
	}
	if f.downUntil.Load() != 0 {
		t.Error("backoff not cleared after the primary recovered")
	}
}

func TestFallbackWindowCancelledCallerIsNotAnOutage(t *testing.T) {
	r := startRedis(t)
	f := NewFallbackWindow(NewRedisWindow(r.client(), "c:", time.Second, 3, 0), NewLocalWindow(time.Second, 3),
		func(err error) { t.Errorf("onFallback(%v) for a cancelled caller", err) })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := f.Record(ctx, "g", time.Now()); err == nil {
		t.Error("Record with a cancelled context succeeded")
	}
}

func TestFallbackWindowRedisKilled(t *testing.T) {
	ctx := context.Background()
	r := startRedis(t)
	c := r.client()
	primary := NewRedisWindow(c, "f:", time.Minute, 1000, time.Minute)
	var mu sync.Mutex
	var reported []error
	f := NewFallbackWindow(primary, NewLocalWindow(time.Minute, 1000), func(err error) {
		mu.Lock()
		reported = append(reported, err)
		mu.Unlock()
	})
	f.retryAfter = 100 * time.Millisecond

	for i := range 10 {
		got, err := f.Record(ctx, "g", time.Now())
		if err != nil || got != i+1 {
			t.Fatalf("Record %d = %d, %v", i, got, err)
		}
	}
	r.kill()
	// Sends go on, counted locally from where they were.
	for i := range 10 {
		got, err := f.Record(ctx, "g", time.Now())
		if err != nil || got != 11+i {
			t.Fatalf("Record %d with redis down = %d, %v; want %d", i, got, err, 11+i)
		}
	}
	mu.Lock()
	if len(reported) != 1 || !errors.Is(reported[0], ErrUnavailable) {
		t.Errorf("onFallback got %v, want one ErrUnavailable", reported)
	}
	mu.Unlock()

	r.restart() // empty, like a crashed cache
	time.Sleep(f.retryAfter)
	got, err := f.Record(ctx, "g", time.Now())
	if err != nil || got != 1 {
		t.Fatalf("Record after restart = %d, %v; want 1 from the fresh redis", got, err)
	}
	if n := c.ZCard(ctx, "f:win:{g}").Val(); n != 1 {
		t.Errorf("redis holds %d events, want 1", n)
	}
}
