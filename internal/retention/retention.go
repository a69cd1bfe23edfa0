// Package retention runs a store's deletion of old messages on a schedule:
// a pass at start, then one every interval. Both stores (SQLite and
// PostgreSQL) start it from Open with their own DeleteBefore, which does
// the deleting in small writer transactions.
package retention

import (
	"context"
	"log/slog"
	"time"
)

// DefaultEvery is the time between two passes when none is configured.
const DefaultEvery = time.Hour

// Job is a running schedule; Stop ends it.
type Job struct {
	stop chan struct{}
	done chan struct{}
}

// Start runs deleteBefore(now - keep) at once and then every `every`
// (DefaultEvery when 0) until Stop.
func Start(keep, every time.Duration, deleteBefore func(context.Context, time.Time) (int64, error)) *Job {
	if every <= 0 {
		every = DefaultEvery
	}
	j := &Job{stop: make(chan struct{}), done: make(chan struct{})}
	go j.loop(keep, every, deleteBefore)
	return j
}

// Stop ends the schedule, cancelling a pass under way, and waits for it.
func (j *Job) Stop() {
	close(j.stop)
	<-j.done
}

func (j *Job) loop(keep, every time.Duration, deleteBefore func(context.Context, time.Time) (int64, error)) {
	defer close(j.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-j.stop
		cancel()
	}()
	t := time.NewTimer(0) // a pass at start, then every `every`
	defer t.Stop()
	for {
		select {
		case <-j.stop:
			return
		case <-t.C:
		}
		cutoff := time.Now().Add(-keep)
		start := time.Now()
		n, err := deleteBefore(ctx, cutoff)
		if err != nil && ctx.Err() == nil {
			slog.Warn("retention: deleting old messages", "err", err, "deleted", n)
		} else if n > 0 {
			slog.Info("retention: deleted old messages", "deleted", n, "before", cutoff.UTC().Format(time.RFC3339), "took", time.Since(start).Round(time.Millisecond))
		}
		t.Reset(every)
	}
}
