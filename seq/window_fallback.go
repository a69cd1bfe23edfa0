package seq

import (
	"context"
	"sync/atomic"
	"time"
)

// defaultRetryAfter is how long FallbackWindow leaves a failed primary alone:
// long enough that a dead Redis does not add a failed round trip (or a dial
// timeout) to every send, short enough that storm counts are shared again soon.
const defaultRetryAfter = 5 * time.Second

// FallbackWindow counts with primary (typically a RedisWindow shared by all
// processes) and switches to fallback (typically a LocalWindow) while primary
// fails, so storm detection degrades to per-process counts instead of failing
// sends. Every event recorded by the primary is also recorded by the fallback,
// so that a failover starts from this process's recent history rather than
// from an empty window.
type FallbackWindow struct {
	primary    Window
	fallback   Window
	onFallback func(error)
	retryAfter time.Duration
	clock      func() time.Time
	downUntil  atomic.Int64 // unix ns before which primary is not tried; 0 while it works
}

// NewFallbackWindow returns a FallbackWindow. onFallback, if not nil, is
// called with the primary's error each time the primary fails and the window
// switches to fallback; it is then not tried again for 5 seconds.
func NewFallbackWindow(primary, fallback Window, onFallback func(error)) *FallbackWindow {
	return &FallbackWindow{
		primary:    primary,
		fallback:   fallback,
		onFallback: onFallback,
		retryAfter: defaultRetryAfter,
		clock:      time.Now,
	}
}

// Record implements Window.
func (f *FallbackWindow) Record(ctx context.Context, key string, now time.Time) (int, error) {
	if until, up := f.primaryUp(); up {
		n, err := f.primary.Record(ctx, key, now)
		if err == nil {
			f.primaryOK(until)
			// The fallback is a shadow here, its count and errors do not matter.
			_, _ = f.fallback.Record(ctx, key, now)
			return n, nil
		}
		if ctx.Err() != nil {
			// The caller gave up; that says nothing about the primary.
			return 0, err
		}
		f.primaryFailed(err)
	}
	return f.fallback.Record(ctx, key, now)
}

// Count implements Window.
func (f *FallbackWindow) Count(ctx context.Context, key string, now time.Time) (int, error) {
	if until, up := f.primaryUp(); up {
		n, err := f.primary.Count(ctx, key, now)
		if err == nil {
			f.primaryOK(until)
			return n, nil
		}
		if ctx.Err() != nil {
			return 0, err
		}
		f.primaryFailed(err)
	}
	return f.fallback.Count(ctx, key, now)
}

// primaryUp reports whether to try the primary, and the backoff deadline it
// saw for primaryOK.
func (f *FallbackWindow) primaryUp() (until int64, up bool) {
	until = f.downUntil.Load()
	return until, until == 0 || f.clock().UnixNano() >= until
}

// primaryOK ends a past backoff period so that later calls skip the clock
// read; the swap fails harmlessly if a newer failure started another period.
func (f *FallbackWindow) primaryOK(until int64) {
	if until != 0 {
		f.downUntil.CompareAndSwap(until, 0)
	}
}

// primaryFailed starts a backoff period. Of the calls failing together, only
// the one that starts the period reports, so a burst of sends against a dead
// Redis logs once per period rather than once per send.
func (f *FallbackWindow) primaryFailed(err error) {
	old := f.downUntil.Load()
	now := f.clock()
	if old != 0 && now.UnixNano() < old {
		return // another call started the period already
	}
	if f.downUntil.CompareAndSwap(old, now.Add(f.retryAfter).UnixNano()) && f.onFallback != nil {
		f.onFallback(err)
	}
}
