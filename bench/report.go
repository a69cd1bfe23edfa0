package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"
)

// Result is what one scenario measured. Field names are the --json output.
type Result struct {
	Scenario string  `json:"scenario"`
	Server   string  `json:"server"`      // "embedded" or the --url
	SQLite   string  `json:"sqlite_sync"` // as configured for an embedded server; "" when unknown
	Sizes    Sizes   `json:"sizes"`
	BodySize int     `json:"body_size"`
	Body     string  `json:"body"`
	SetupSec float64 `json:"setup_seconds"`
	RunSec   float64 `json:"run_seconds"` // first send to last delivery (or the measured phase)

	Sent             int64   `json:"sent"`          // durable sends: `sent` answers
	SendsPerSec      float64 `json:"sends_per_sec"` // first send to last `sent`
	Delivered        int64   `json:"delivered"`     // messages in live msg/batch frames
	DeliveriesPerSec float64 `json:"deliveries_per_sec"`
	ViaPull          int64   `json:"via_pull"` // messages first obtained by sync/GET
	Latency          Latency `json:"latency"`  // send → live delivery
	AckLatency       Latency `json:"sent_latency"`

	Catchup *Catchup `json:"catchup,omitempty"`
	Memory  *Memory  `json:"memory,omitempty"`

	ServerRSS    float64 `json:"server_rss_bytes,omitempty"` // at the end
	ServerCPUSec float64 `json:"server_cpu_seconds,omitempty"`
	ClientCPUSec float64 `json:"client_cpu_seconds,omitempty"`
	Inflight     int     `json:"inflight"` // unanswered sends per sender

	// The measured phase (first send to the end of the drain) and the
	// server process's counters over it; system calls need its PID.
	MeasuredSec        float64 `json:"measured_seconds,omitempty"`
	ServerWrites       int64   `json:"server_write_syscalls,omitempty"`
	ServerReads        int64   `json:"server_read_syscalls,omitempty"`
	ServerCPUPerMsgUS  float64 `json:"server_cpu_us_per_msg,omitempty"` // per durable send, with its deliveries
	ClientCPUPerMsgUS  float64 `json:"bench_cpu_us_per_msg,omitempty"`
	ServerWritesPerMsg float64 `json:"server_writes_per_msg,omitempty"`
	ServerReadsPerMsg  float64 `json:"server_reads_per_msg,omitempty"`
	ServerCoreShare    float64 `json:"server_core_share,omitempty"` // CPU time / wall / cores
	ClientCoreShare    float64 `json:"bench_core_share,omitempty"`
	// NodesCPUPerMsgUS is each node's CPU per durable send (--url a,b,c),
	// from its /metrics: where a cluster's cost per message goes.
	NodesCPUPerMsgUS []float64 `json:"nodes_cpu_us_per_msg,omitempty"`

	Resyncs     int64 `json:"resyncs"`
	Storms      int64 `json:"storms"`
	BatchFrames int64 `json:"batch_frames"`
	Disconnects int64 `json:"disconnects"`
	Retries     int64 `json:"retries"`

	Correctness Correctness `json:"correctness"`
	SendErrors  []Count     `json:"send_errors"`
	Deviations  []Count     `json:"protocol_deviations"` // answers that break PROTOCOL.md
	Notes       []Count     `json:"notes"`
	Error       string      `json:"error,omitempty"` // the scenario could not run
}

// Correctness is the line every scenario must keep clean.
type Correctness struct {
	Expected        int64 `json:"expected"` // (session, message) deliveries the ledger calls for
	Received        int64 `json:"received"`
	Lost            int64 `json:"lost"`
	Duplicated      int64 `json:"duplicated"`       // same seq twice on one connection's live path
	OrderViolations int64 `json:"order_violations"` // live seq below one already delivered, or a pull page out of order
	Unexpected      int64 `json:"unexpected"`       // a seq nobody was told was stored, own echoes, foreign conversations
	SeqClashes      int64 `json:"seq_clashes"`      // one seq confirmed to two senders
	Unconfirmed     int64 `json:"unconfirmed"`      // sends never answered
}

// OK reports whether nothing was lost, duplicated, reordered or invented.
func (c Correctness) OK() bool {
	return c.Lost == 0 && c.Duplicated == 0 && c.OrderViolations == 0 && c.Unexpected == 0 && c.SeqClashes == 0 && c.Unconfirmed == 0
}

// Catchup is the offline member's pull.
type Catchup struct {
	Members     int     `json:"members"`  // members that were offline
	Messages    int64   `json:"messages"` // pulled per member
	Pages       int64   `json:"pages"`
	Seconds     float64 `json:"seconds"`         // slowest member: first GET to completed
	ConnectSec  float64 `json:"connect_seconds"` // WebSocket connect + hello before the pull
	MsgsPerSec  float64 `json:"messages_per_sec"`
	SecondsP50  float64 `json:"seconds_p50"`
	AfterSeqLow int64   `json:"after_seq"` // where the pull started
}

// Memory is the idle scenario's reading of the server's metrics.
type Memory struct {
	Sessions        int     `json:"sessions"`
	RSSBefore       float64 `json:"rss_before_bytes"`
	RSSAfter        float64 `json:"rss_after_bytes"`
	BytesPerSession float64 `json:"rss_bytes_per_session"`
	HeapPerSession  float64 `json:"heap_stack_bytes_per_session,omitempty"` // heap + stack in use, after GC, if exported
	GoroutinesPerS  float64 `json:"goroutines_per_session,omitempty"`       // go_goroutines, if exported
	GaugeSessions   float64 `json:"imserver_sessions"`                      // -1 when the gauge is absent
	ConnectPerSec   float64 `json:"connects_per_sec"`
}

// Count is a tally of one kind of event.
type Count struct {
	What string `json:"what"`
	N    int    `json:"n"`
}

// Report is the --json document.
type Report struct {
	Started time.Time `json:"started"`
	Machine Machine   `json:"machine"`
	Command string    `json:"command"`
	Results []*Result `json:"results"`
}

// Machine describes where the load generator ran.
type Machine struct {
	CPUs int    `json:"cpus"`
	OS   string `json:"os"`
	Arch string `json:"arch"`
	Go   string `json:"go"`
}

func thisMachine() Machine {
	return Machine{CPUs: runtime.NumCPU(), OS: runtime.GOOS, Arch: runtime.GOARCH, Go: runtime.Version()}
}

func writeJSON(w io.Writer, rep *Report) error { return writeJSONValue(w, rep) }

func writeJSONValue(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeTable prints one column per scenario.
func writeTable(w io.Writer, rep *Report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(label string, f func(r *Result) string) {
		cells := []string{label}
		any := false
		for _, r := range rep.Results {
			v := ""
			if r.Error == "" || label == "scenario" || label == "error" {
				v = f(r)
			}
			any = any || v != ""
			cells = append(cells, v)
		}
		if any {
			fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
		}
	}
	row("scenario", func(r *Result) string { return r.Scenario })
	row("server", func(r *Result) string {
		if r.SQLite != "" {
			return r.Server + " sqlite " + r.SQLite
		}
		return r.Server
	})
	row("users/groups x members", func(r *Result) string {
		return fmt.Sprintf("%d/%dx%d", r.Sizes.Users, r.Sizes.Groups, r.Sizes.Members)
	})
	row("sessions/senders", func(r *Result) string { return fmt.Sprintf("%d/%d", r.Sizes.Sessions, r.Sizes.Senders) })
	row("in flight per sender", func(r *Result) string { return fmt.Sprint(r.Inflight) })
	row("target rate", func(r *Result) string {
		if r.Sizes.Rate == 0 {
			return "flat out"
		}
		return si(r.Sizes.Rate) + "/s"
	})
	row("setup / run s", func(r *Result) string { return fmt.Sprintf("%.1f / %.2f", r.SetupSec, r.RunSec) })
	row("durable sends", func(r *Result) string { return si(float64(r.Sent)) })
	row("durable sends/s", func(r *Result) string { return nz(r.SendsPerSec, si(r.SendsPerSec)) })
	row("deliveries (live)", func(r *Result) string { return si(float64(r.Delivered)) })
	row("deliveries/s", func(r *Result) string { return nz(r.DeliveriesPerSec, si(r.DeliveriesPerSec)) })
	row("pulled (sync/GET)", func(r *Result) string { return si(float64(r.ViaPull)) })
	row("deliver p50/p90 ms", func(r *Result) string {
		return nz(float64(r.Latency.Count), fmt.Sprintf("%s / %s", ms(r.Latency.P50), ms(r.Latency.P90)))
	})
	row("deliver p99/max ms", func(r *Result) string {
		return nz(float64(r.Latency.Count), fmt.Sprintf("%s / %s", ms(r.Latency.P99), ms(r.Latency.Max)))
	})
	row("sent p50/p99 ms", func(r *Result) string {
		return nz(float64(r.AckLatency.Count), fmt.Sprintf("%s / %s", ms(r.AckLatency.P50), ms(r.AckLatency.P99)))
	})
	row("catch-up", func(r *Result) string {
		if r.Catchup == nil {
			return ""
		}
		return fmt.Sprintf("%s msgs in %.3fs", si(float64(r.Catchup.Messages)), r.Catchup.Seconds)
	})
	row("catch-up msgs/s", func(r *Result) string {
		if r.Catchup == nil {
			return ""
		}
		return si(r.Catchup.MsgsPerSec)
	})
	row("memory/session", func(r *Result) string {
		if r.Memory == nil {
			return ""
		}
		s := bytesIEC(r.Memory.BytesPerSession) + " RSS"
		if r.Memory.HeapPerSession > 0 {
			s += ", " + bytesIEC(r.Memory.HeapPerSession) + " heap+stack"
		}
		return s
	})
	row("server RSS end", func(r *Result) string { return nz(r.ServerRSS, bytesIEC(r.ServerRSS)) })
	row("cpu s server/bench", func(r *Result) string {
		return nz(r.ServerCPUSec+r.ClientCPUSec, fmt.Sprintf("%.1f / %.1f", r.ServerCPUSec, r.ClientCPUSec))
	})
	row("cpu µs/msg server/bench", func(r *Result) string {
		return nz(r.ServerCPUPerMsgUS, fmt.Sprintf("%.1f / %.1f", r.ServerCPUPerMsgUS, r.ClientCPUPerMsgUS))
	})
	row("cpu µs/msg nodes (sum: each)", func(r *Result) string {
		if len(r.NodesCPUPerMsgUS) == 0 {
			return ""
		}
		sum, each := 0.0, make([]string, len(r.NodesCPUPerMsgUS))
		for i, v := range r.NodesCPUPerMsgUS {
			sum += v
			each[i] = fmt.Sprintf("%.1f", v)
		}
		return fmt.Sprintf("%.1f: %s", sum, strings.Join(each, " / "))
	})
	row("core share server/bench", func(r *Result) string {
		return nz(r.ServerCoreShare, fmt.Sprintf("%.0f%% / %.0f%%", 100*r.ServerCoreShare, 100*r.ClientCoreShare))
	})
	row("server writes/reads per msg", func(r *Result) string {
		return nz(r.ServerWritesPerMsg, fmt.Sprintf("%.2f / %.2f", r.ServerWritesPerMsg, r.ServerReadsPerMsg))
	})
	row("resync/storm/batch/disc", func(r *Result) string {
		return fmt.Sprintf("%d/%d/%d/%d", r.Resyncs, r.Storms, r.BatchFrames, r.Disconnects)
	})
	row("expected", func(r *Result) string { return fmt.Sprint(r.Correctness.Expected) })
	row("received", func(r *Result) string { return fmt.Sprint(r.Correctness.Received) })
	row("lost", func(r *Result) string { return fmt.Sprint(r.Correctness.Lost) })
	row("duplicated", func(r *Result) string { return fmt.Sprint(r.Correctness.Duplicated) })
	row("order violations", func(r *Result) string { return fmt.Sprint(r.Correctness.OrderViolations) })
	row("unexpected/unconfirmed", func(r *Result) string {
		return fmt.Sprintf("%d/%d", r.Correctness.Unexpected, r.Correctness.Unconfirmed)
	})
	row("send errors", func(r *Result) string { return fmt.Sprint(countSum(r.SendErrors)) })
	row("protocol deviations", func(r *Result) string { return fmt.Sprint(countSum(r.Deviations)) })
	row("verdict", func(r *Result) string {
		if r.Error != "" {
			return "ERROR"
		}
		if r.Correctness.OK() && len(r.Deviations) == 0 && len(r.SendErrors) == 0 {
			return "ok"
		}
		return "FAIL"
	})
	tw.Flush()
	for _, r := range rep.Results {
		if r.Error != "" {
			fmt.Fprintf(w, "%s: error: %s\n", r.Scenario, r.Error)
		}
		for _, c := range r.Deviations {
			fmt.Fprintf(w, "%s: protocol deviation (x%d): %s\n", r.Scenario, c.N, c.What)
		}
		for _, c := range r.SendErrors {
			fmt.Fprintf(w, "%s: send error (x%d): %s\n", r.Scenario, c.N, c.What)
		}
		for _, c := range r.Notes {
			fmt.Fprintf(w, "%s: note (x%d): %s\n", r.Scenario, c.N, c.What)
		}
	}
}

func countSum(cs []Count) int {
	n := 0
	for _, c := range cs {
		n += c.N
	}
	return n
}

func nz(v float64, s string) string {
	if v == 0 {
		return "-"
	}
	return s
}

func ms(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// si prints a count with k/M suffixes: 12.3k.
func si(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.1fk", v/1e3)
	case v == float64(int64(v)):
		return fmt.Sprintf("%d", int64(v))
	default:
		return fmt.Sprintf("%.1f", v)
	}
}

func bytesIEC(v float64) string {
	neg := ""
	if v < 0 {
		neg, v = "-", -v
	}
	switch {
	case v >= 1<<30:
		return fmt.Sprintf("%s%.2f GiB", neg, v/(1<<30))
	case v >= 1<<20:
		return fmt.Sprintf("%s%.1f MiB", neg, v/(1<<20))
	case v >= 1<<10:
		return fmt.Sprintf("%s%.1f KiB", neg, v/(1<<10))
	default:
		return fmt.Sprintf("%s%.0f B", neg, v)
	}
}
