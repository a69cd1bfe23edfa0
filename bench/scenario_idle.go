package bench

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// idleScenario opens C sessions that do nothing and reads the server's
// memory from GET /metrics before and after: process_resident_memory_bytes,
// and heap and stack in use and imserver_sessions when exported.
// Then one message per group checks that the idle sessions still deliver.
var idleScenario = &scenario{
	name:     "idle",
	defaults: Sizes{Users: 100, Groups: 10, Members: 10, Sessions: 2000, Senders: 10, Messages: 10},
	adjust: func(sz *Sizes, given Sizes) {
		clampSizes(sz)
		if given.Messages == 0 {
			sz.Messages = sz.Groups
		}
	},
	run: runIdle,
}

// idleSettle lets the server finish the handshakes' work before reading.
const idleSettle = time.Second

func runIdle(ctx context.Context, r *run, res *Result) error {
	start := time.Now()
	if err := r.setupWorld(ctx, func(u int) [][]int { return stridedGroups(u, r.sizes.Groups, r.sizes.Members) }); err != nil {
		return err
	}
	// One session opened and closed first, so one-time costs of the
	// WebSocket path (pools, buffers, code pages) are not put on the sessions.
	warm := newSession(-1, r.users[0], r)
	if err := warm.connect(ctx, false); err != nil {
		return err
	}
	warm.disconnect()
	res.SetupSec = time.Since(start).Seconds()
	r.setPhase("reading memory before")
	sleep(ctx, idleSettle)
	before, err := r.settledMemory(ctx)
	if err != nil {
		return err
	}
	r.beginMeasure(ctx)
	r.setPhase("connecting")
	t0 := time.Now()
	if err := r.connectAll(ctx, r.sessions); err != nil {
		return err
	}
	connectTook := time.Since(t0)
	res.RunSec = connectTook.Seconds()
	r.setPhase("idle, reading memory after")
	sleep(ctx, idleSettle)
	after, err := r.settledMemory(ctx)
	if err != nil {
		return err
	}
	n := float64(len(r.sessions))
	delta := func(name string) float64 { return (after[name] - before[name]) / n }
	m := &Memory{
		Sessions:        len(r.sessions),
		RSSBefore:       before[metricRSS],
		RSSAfter:        after[metricRSS],
		BytesPerSession: delta(metricRSS),
		ConnectPerSec:   n / connectTook.Seconds(),
		GaugeSessions:   -1,
	}
	if _, ok := after[metricHeapInuse]; ok {
		m.HeapPerSession = delta(metricHeapInuse) + delta(metricStackInuse)
	}
	if _, ok := after["go_goroutines"]; ok {
		m.GoroutinesPerS = delta("go_goroutines")
	}
	if g, ok := after["imserver_sessions"]; ok {
		m.GaugeSessions = g
		if int(g) != len(r.sessions) {
			r.note("gauge", fmt.Sprintf("imserver_sessions reads %v with %d sessions open", g, len(r.sessions)))
		}
	}
	res.Memory = m

	// The idle sessions must still be alive: one message per group.
	r.setPhase("checking delivery")
	go r.acker(ctx)
	r.runSenders(ctx, sendPlan{senders: r.pickSenders(r.sizes.Senders), total: r.sizes.Messages})
	r.drain(ctx)
	return ctx.Err()
}

const (
	metricRSS        = "process_resident_memory_bytes"
	metricHeapInuse  = "go_memstats_heap_inuse_bytes"
	metricStackInuse = "go_memstats_stack_inuse_bytes"
	metricGCCount    = "go_gc_duration_seconds_count"
	metricAllocTotal = "go_memstats_alloc_bytes_total"
)

// settledMemory reads the server's memory once its garbage is collected.
// Registration hashes passwords with argon2 (19 MiB each), so right after
// setup the heap is mostly garbage that the next GC, at a random moment
// while sessions connect, would free: the difference of two raw readings
// can even be negative. The bench cannot call runtime.GC in the server, but
// it can make the server allocate: it scrapes /metrics until two GC cycles
// have completed (the second also finishes sweeping the first), and then
// reads heap and stack in use, which then hold little but live data.
// RSS is read too; it stays inflated by freed pages the runtime keeps.
func (r *run) settledMemory(ctx context.Context) (serverMetrics, error) {
	m, err := r.api.scrapeMetrics(ctx)
	if err != nil {
		return nil, err
	}
	if _, ok := m[metricRSS]; !ok {
		return nil, fmt.Errorf("GET /metrics lacks %s, which the idle scenario reads", metricRSS)
	}
	gc0, ok := m[metricGCCount]
	if !ok {
		r.note("memory", "GET /metrics lacks "+metricGCCount+": memory read without waiting for a GC")
		return m, nil
	}
	deadline := time.Now().Add(60 * time.Second)
	for m[metricGCCount] < gc0+2 {
		if time.Now().After(deadline) {
			r.note("memory", "no GC within 60s of scraping /metrics: memory read with garbage in it")
			return m, nil
		}
		// A few scrapes at once: each allocates some tens of KiB in the server.
		var mu sync.Mutex
		var last serverMetrics
		err := parallel(ctx, 32, 4, func(int) error {
			x, err := r.api.scrapeMetrics(ctx)
			if err == nil {
				mu.Lock()
				if last == nil || x[metricGCCount] > last[metricGCCount] || x[metricAllocTotal] > last[metricAllocTotal] {
					last = x
				}
				mu.Unlock()
			}
			return err
		})
		if err != nil {
			return nil, err
		}
		m = last
	}
	return m, nil
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
