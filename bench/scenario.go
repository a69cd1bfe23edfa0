package bench

import (
	"context"
	"math"
	"runtime"
	"strings"
	"time"
)

// scenario is one kind of load.
type scenario struct {
	name     string
	defaults Sizes
	// adjust fixes sizes that depend on each other after flags and defaults
	// are merged; given is what the flags set.
	adjust func(sz *Sizes, given Sizes)
	run    func(ctx context.Context, r *run, res *Result) error
	// inflight is the scenario's --inflight unless the flag is given; 0
	// keeps the flag's default.
	inflight int
}

// scenarios in the order `all` runs them. The defaults are sized for a
// 2-core machine running both the server and the bench.
var scenarios = []*scenario{sendScenario, fanoutScenario, catchupScenario, idleScenario, mixedScenario, interactiveScenario}

func findScenario(name string) *scenario {
	for _, s := range scenarios {
		if s.name == name {
			return s
		}
	}
	return nil
}

func scenarioNames() string {
	var n []string
	for _, s := range scenarios {
		n = append(n, s.name)
	}
	return strings.Join(n, "|")
}

// measure marks the start of the measured phase: server CPU and bench CPU
// are counted from here.
type measure struct {
	serverCPU float64
	clientCPU float64
	ok        bool
	start     time.Time
	proc      procSample // the server process, when its PID is known
	nodesCPU  []float64  // each node's CPU seconds, with several nodes (NaN: unknown)
}

func (r *run) beginMeasure(ctx context.Context) {
	m := measure{clientCPU: processCPUSeconds(), start: time.Now()}
	if r.serverPID > 0 {
		m.proc, _ = readProc(r.serverPID)
	}
	if sm, err := r.api.scrapeMetrics(ctx); err == nil {
		m.serverCPU, m.ok = sm["process_cpu_seconds_total"]
	} else {
		// The server's CPU and memory go missing from the report; say why
		// (a server's /metrics wants its metrics token: --metrics-token).
		r.note("metrics", err.Error())
	}
	if len(r.nodes) > 1 {
		m.nodesCPU = r.nodesCPU(ctx)
	}
	r.meas = m
}

// finish fills the fields every scenario reports.
func (r *run) finish(res *Result) {
	m := r.meas
	first := time.Duration(r.firstSend.Load())
	lastSent := time.Duration(r.lastSent.Load())
	lastDeliv := r.lastDelivery()
	res.Sent = r.stats.confirmed.Load()
	res.Delivered = r.stats.liveDeliveries.Load()
	res.ViaPull = r.stats.viaPull.Load()
	if first > 0 && lastSent > first {
		res.SendsPerSec = float64(res.Sent) / (lastSent - first).Seconds()
	}
	if first > 0 && lastDeliv > first {
		res.DeliveriesPerSec = float64(res.Delivered) / (lastDeliv - first).Seconds()
	}
	if res.RunSec == 0 && first > 0 {
		res.RunSec = (max(lastSent, lastDeliv) - first).Seconds()
	}
	res.Latency = r.latency.summary()
	res.AckLatency = r.ackLatency.summary()
	res.Resyncs = r.stats.resyncs.Load()
	res.Storms = r.stats.storms.Load()
	res.BatchFrames = r.stats.batchFrames.Load()
	res.Disconnects = r.stats.disconnects.Load()
	res.Retries = r.stats.retries.Load()
	res.Correctness = r.account()
	r.mu.Lock()
	res.SendErrors = sortedCounts(r.sendErrors)
	res.Deviations = sortedCounts(r.deviations)
	res.Notes = append(res.Notes, sortedCounts(r.notes)...)
	r.mu.Unlock()
	if n := r.stats.reordered.Load(); n > 0 {
		res.Notes = append(res.Notes, Count{What: "live messages after a larger seq of their conversation, from several nodes (each publishes what it commits; not an order violation across nodes)", N: int(n)})
	}
	if n := r.stats.unknownFrames.Load(); n > 0 {
		res.Notes = append(res.Notes, Count{What: "frames of a type the bench does not know (extensions?)", N: int(n)})
	}
	if n := r.stats.finalPulls.Load(); n > 0 {
		res.Notes = append(res.Notes, Count{What: "messages missing after a resync, obtained by the final pull", N: int(n)})
	}
	if m.clientCPU > 0 {
		res.ClientCPUSec = processCPUSeconds() - m.clientCPU
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if sm, err := r.api.scrapeMetrics(ctx); err == nil {
		res.ServerRSS = sm["process_resident_memory_bytes"]
		if v, ok := sm["process_cpu_seconds_total"]; ok && m.ok {
			res.ServerCPUSec = v - m.serverCPU
		}
	}
	r.finishProc(res)
	if len(m.nodesCPU) > 0 && res.Sent > 0 {
		end := r.nodesCPU(ctx)
		for i, v := range end {
			if math.IsNaN(v) || math.IsNaN(m.nodesCPU[i]) {
				res.NodesCPUPerMsgUS = nil
				break
			}
			res.NodesCPUPerMsgUS = append(res.NodesCPUPerMsgUS, (v-m.nodesCPU[i])/float64(res.Sent)*1e6)
		}
	}
}

// nodesCPU reads every node's process_cpu_seconds_total (NaN where it
// cannot).
func (r *run) nodesCPU(ctx context.Context) []float64 {
	out := make([]float64, len(r.nodes))
	for i, n := range r.nodes {
		out[i] = math.NaN()
		if sm, err := n.scrapeMetrics(ctx); err == nil {
			if v, ok := sm["process_cpu_seconds_total"]; ok {
				out[i] = v
			}
		}
	}
	return out
}

// finishProc fills the per-message figures of the server process, read
// from /proc when its PID is known: CPU time (which then replaces the
// /metrics reading: same source, and it works for any server), write and
// read system calls, and its share of the machine's cores over the
// measured phase, which shows a serial stall as idle cores.
func (r *run) finishProc(res *Result) {
	m := r.meas
	if m.start.IsZero() {
		return
	}
	wall := time.Since(m.start).Seconds()
	res.MeasuredSec = wall
	if m.proc.ok {
		if p, err := readProc(r.serverPID); err == nil {
			res.ServerCPUSec = p.cpuSec - m.proc.cpuSec
			res.ServerWrites = p.writes - m.proc.writes
			res.ServerReads = p.reads - m.proc.reads
		}
	}
	cores := float64(runtime.NumCPU())
	if wall > 0 {
		res.ServerCoreShare = res.ServerCPUSec / wall / cores
		res.ClientCoreShare = res.ClientCPUSec / wall / cores
	}
	if res.Sent > 0 {
		res.ServerCPUPerMsgUS = res.ServerCPUSec / float64(res.Sent) * 1e6
		res.ClientCPUPerMsgUS = res.ClientCPUSec / float64(res.Sent) * 1e6
		if m.proc.ok {
			res.ServerWritesPerMsg = float64(res.ServerWrites) / float64(res.Sent)
			res.ServerReadsPerMsg = float64(res.ServerReads) / float64(res.Sent)
		}
	}
}

// setupWorld registers the users, creates the groups (member lists index
// r.users) and makes the sessions; it connects nobody.
func (r *run) setupWorld(ctx context.Context, groups func(users int) [][]int) error {
	r.setPhase("setup: registering users")
	if err := r.setupUsers(ctx, r.sizes.Users); err != nil {
		return err
	}
	if err := r.setupGroups(ctx, groups(len(r.users))); err != nil {
		return err
	}
	r.setupSessions(r.sizes.Sessions)
	return nil
}

// everyoneOnline is the shape of send and fanout: all sessions connected,
// the senders send the plan, the bench waits for every delivery.
func (r *run) everyoneOnline(ctx context.Context, res *Result, groups func(users int) [][]int) error {
	return r.everyoneOnlinePlan(ctx, res, groups, func() sendPlan {
		return sendPlan{senders: r.pickSenders(r.sizes.Senders)}
	})
}

// everyoneOnlinePlan is everyoneOnline with the senders and their choice of
// conversation given by plan, called once the world is set up; total, rate
// and duration come from the sizes.
func (r *run) everyoneOnlinePlan(ctx context.Context, res *Result, groups func(users int) [][]int, plan func() sendPlan) error {
	start := time.Now()
	if err := r.setupWorld(ctx, groups); err != nil {
		return err
	}
	if err := r.connectAll(ctx, r.sessions); err != nil {
		return err
	}
	stopTypists, err := r.startTypists(ctx)
	if err != nil {
		return err
	}
	res.SetupSec = time.Since(start).Seconds()
	go r.acker(ctx)
	r.beginMeasure(ctx)
	r.setPhase("sending")
	p := plan()
	p.total, p.rate, p.duration = r.sizes.Messages, r.sizes.Rate, r.sizes.Duration
	r.runSenders(ctx, p)
	r.drain(ctx)
	stopTypists()
	r.checkFolds(ctx)
	return ctx.Err()
}

// clampSizes keeps sizes consistent: at least one of everything, members
// within users, senders within sessions.
func clampSizes(sz *Sizes) {
	sz.Users = max(sz.Users, 1)
	sz.Groups = max(sz.Groups, 1)
	sz.Members = min(max(sz.Members, 1), sz.Users)
	sz.Sessions = max(sz.Sessions, 1)
	sz.Senders = min(max(sz.Senders, 1), sz.Sessions, sz.Users)
}
