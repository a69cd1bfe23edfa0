package bench

import (
	"context"
	"fmt"
	"time"
)

// idleScenario opens C sessions that do nothing and reads the server's
// memory from GET /metrics before and after: process_resident_memory_bytes,
// and heap and stack in use and imserver_sessions when exported.
// Then one message per group checks that the idle sessions still deliver.
var idleScenario = &scenario{
	name: "idle",
	// 5000 sessions: what is left of the server's memory noise after
	// settling (a few hundred KiB to a MiB or two) is then well under
	// 1 KiB per session. Bench and server each hold one socket per session.
	defaults: Sizes{Users: 100, Groups: 10, Members: 10, Sessions: 5000, Senders: 10, Messages: 10},
	adjust: func(sz *Sizes, given Sizes) {
		clampSizes(sz)
		if given.Messages == 0 {
			sz.Messages = sz.Groups
		}
	},
	run: runIdle,
}

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
	before, err := r.settledMemory(ctx, "before", len(r.sessions))
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
	after, err := r.settledMemory(ctx, "after", len(r.sessions))
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
	metricHeapAlloc  = "go_memstats_heap_alloc_bytes"
	metricNextGC     = "go_memstats_next_gc_bytes"
)

// settleMetrics are the figures that must stop moving before a reading counts.
var settleMetrics = []string{metricRSS, metricHeapInuse, metricStackInuse}

const (
	// settlePoll spaces the readings that must agree. The runtime gives
	// pages back to the OS in bursts, so the readings span a second.
	settlePoll     = 500 * time.Millisecond
	settleReadings = 3
	// settleTimeout bounds the wait for one reading (before or after).
	settleTimeout = 60 * time.Second
)

// settleTolerance is how far readings that agree may differ: a quarter KiB
// per session, so that what still moves is small beside the figure, but no
// less than 512 KiB, since each scrape leaves ~150 KiB of garbage in the
// server's heap.
func settleTolerance(sessions int) float64 {
	return max(512<<10, float64(sessions)*256)
}

// settledMemory reads the server's memory once its garbage is collected and
// the runtime has given back to the OS what it is going to give back.
//
// Registration hashes passwords with argon2 (19 MiB each), so right after
// setup the heap is mostly garbage and the process holds pages it no longer
// needs. The bench cannot call runtime.GC or debug.FreeOSMemory in a server
// it may only reach through /metrics, but it can make the server allocate
// until GC cycles complete (collectGarbage). Right after a GC, dead objects
// not yet swept still count as in use; the background scavenger returns
// free pages to the OS over the next seconds, down to ~10% above the heap
// of the last cycle, and skips 4 MiB chunks that were nearly full in this
// cycle or the one before: a reading taken then lands anywhere on that
// slope, and RSS can fall by tens of MiB after it, some of it only after
// the next GC (after setup it has held still for seconds at twice its final
// value). So the bench waits until RSS, heap and stack hold still
// (steadyMemory), and repeats GC-and-wait until one more GC cycle moves none
// of them by more than the tolerance.
//
// The reading is then the server at rest as its GC leaves it: between
// cycles the heap grows to its goal (twice the live heap at GOGC=100) and
// the runtime keeps those pages, as it does in a server with idle sessions
// and a little traffic. So RSS per session includes that headroom, and
// heap + stack in use per session does not.
func (r *run) settledMemory(ctx context.Context, what string, sessions int) (serverMetrics, error) {
	m, err := r.api.scrapeMetrics(ctx)
	if err != nil {
		return nil, err
	}
	if _, ok := m[metricRSS]; !ok {
		return nil, fmt.Errorf("GET /metrics lacks %s, which the idle scenario reads", metricRSS)
	}
	deadline := time.Now().Add(settleTimeout)
	tol := settleTolerance(sessions)
	unsettled := func(why string) {
		r.note("memory", fmt.Sprintf("server memory %s did not settle within %s (%s): figures may be off", what, settleTimeout, why))
	}
	if _, ok := m[metricGCCount]; !ok {
		r.note("memory", "GET /metrics lacks "+metricGCCount+": memory read without waiting for a GC")
		m, steady, err := r.steadyMemory(ctx, tol, deadline)
		if err == nil && !steady {
			unsettled(fmt.Sprintf("it still moved by more than %s between readings", bytesIEC(tol)))
		}
		return m, err
	}
	// Two cycles first: sync.Pool keeps what it held for one more cycle,
	// and the scavenger's goal follows the heap of the cycle before.
	cycles := 2
	var prev serverMetrics
	for {
		ok, err := r.collectGarbage(ctx, cycles, deadline)
		if err != nil {
			return nil, err
		}
		if !ok {
			unsettled("no GC cycle: read with garbage in it")
			return r.api.scrapeMetrics(ctx)
		}
		m, steady, err := r.steadyMemory(ctx, tol, deadline)
		if err != nil {
			return nil, err
		}
		if !steady {
			unsettled(fmt.Sprintf("it still moved by more than %s between readings", bytesIEC(tol)))
			return m, nil
		}
		if prev != nil && metricsAgree([]serverMetrics{prev, m}, settleMetrics, tol) {
			return m, nil
		}
		if time.Now().After(deadline) {
			unsettled(fmt.Sprintf("it still moved by more than %s from one GC cycle to the next", bytesIEC(tol)))
			return m, nil
		}
		prev, cycles = m, 1
	}
}

// steadyMemory scrapes /metrics every settlePoll until settleReadings
// readings in a row agree within tol, and returns the last one; steady is
// false when the deadline came first.
func (r *run) steadyMemory(ctx context.Context, tol float64, deadline time.Time) (m serverMetrics, steady bool, err error) {
	var window []serverMetrics
	for {
		m, err = r.api.scrapeMetrics(ctx)
		if err != nil {
			return nil, false, err
		}
		window = append(window, m)
		if len(window) > settleReadings {
			window = window[1:]
		}
		if len(window) == settleReadings && metricsAgree(window, settleMetrics, tol) {
			return m, true, nil
		}
		if time.Now().After(deadline) {
			return m, false, nil
		}
		sleep(ctx, settlePoll)
		if err := ctx.Err(); err != nil {
			return nil, false, err
		}
	}
}

// collectGarbage makes the server complete n more GC cycles: every scrape
// of /metrics allocates ~150 KiB in the server, so enough of them reach its
// next GC. Far from it the bench scrapes several at once to get there
// sooner; near it, one at a time, because what the server allocates while
// it marks is kept as if live for that cycle, and would move the heap and
// the heap goal (hence RSS) from one cycle to the next by MiBs. It reports
// false when the deadline comes first.
func (r *run) collectGarbage(ctx context.Context, n int, deadline time.Time) (bool, error) {
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	target := -1.0
	for {
		m, err := r.api.scrapeMetrics(dctx)
		switch {
		case ctx.Err() != nil:
			return false, ctx.Err()
		case dctx.Err() != nil:
			return false, nil
		case err != nil:
			return false, err
		}
		if target < 0 {
			target = m[metricGCCount] + float64(n)
		}
		if m[metricGCCount] >= target {
			return true, nil
		}
		if goal, ok := m[metricNextGC]; ok && m[metricHeapAlloc] >= gcNear*goal {
			continue
		}
		err = parallel(dctx, 8, 4, func(int) error {
			_, err := r.api.scrapeMetrics(dctx)
			return err
		})
		if err != nil && dctx.Err() == nil {
			return false, err
		}
	}
}

// gcNear is the share of the heap goal past which the next GC may start:
// the pacer starts one no earlier than 70% of the way from the live heap
// (about half the goal at GOGC=100) to the goal.
const gcNear = 0.8

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
