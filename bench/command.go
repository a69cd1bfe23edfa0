package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

// Sizes are a scenario's dimensions; zero fields take the scenario's default.
type Sizes struct {
	Users    int           `json:"users"`
	Groups   int           `json:"groups"`
	Members  int           `json:"members"`
	Sessions int           `json:"sessions"`
	Senders  int           `json:"senders"`
	Messages int           `json:"messages"`
	Rate     float64       `json:"rate"` // messages/s over all senders; 0 = flat out
	Duration time.Duration `json:"duration_ns"`
}

// Options configure a bench run.
type Options struct {
	URL       string // drive this running server; empty = embedded
	Embedded  bool
	ServerBin string // binary for embedded mode
	// MetricsToken reads /metrics of a --url server or of one started with
	// --server-config; the bench's own configuration has a token of its own.
	MetricsToken string
	// ServerConfig is a config file for the embedded server instead of
	// the bench's own (which raises the limits and turns storms off).
	ServerConfig string
	Scenario     string // send|fanout|catchup|idle|mixed|interactive|all
	Sizes        Sizes
	RateSet      bool // Sizes.Rate was given (0 then means flat out, not the default)
	BodySize     int
	// Body is what fills a body after its timestamp: "pad" (one 'x' word,
	// the default: every message shares its words) or "words" (a Zipf
	// draw from a vocabulary, as people write).
	Body string
	// Mix is the kinds of the sends: "team" mixes in reactions, edits and
	// deletes (the mixed scenario's default), "none" sends text only.
	Mix      string
	Inflight int // unanswered sends per sender
	// InflightSet says --inflight was given; otherwise a scenario may
	// choose its own (interactive: 1).
	InflightSet bool
	// ServerPID is the process of a --url server, for its CPU time and
	// system calls from /proc; an embedded server's is known.
	ServerPID  int
	SQLiteSync string
	JSON       bool
	Progress   bool
	KeepTmp    bool
	// DrainTimeout is how long the bench waits without progress for the last
	// answers and deliveries before it counts what is missing as lost.
	DrainTimeout time.Duration
	CPUProfile   string
	// Typists online in a group of their own, each sending a typing frame
	// every TypingEvery, beside the send and fanout scenarios.
	Typists     int
	TypingEvery time.Duration
	// Growth configures --scenario growth.
	Growth GrowthOptions

	Stdout, Stderr io.Writer
}

// Command returns the `bench` cobra command.
func Command() *cobra.Command {
	o := Options{}
	var growthSizes string
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure an imserver: sends/s, deliveries/s, latency, catch-up, memory, and correctness",
		Long: `bench drives an imserver over its public protocol only, either a running one
(--url) or one it starts on a temporary database (--embedded, the default).

Scenarios:
  send     S senders into G groups of M members, everyone online
  fanout   one group of M members, everyone online, S senders
  catchup  a member offline while K messages arrive, then it connects and pulls
  idle     C idle sessions; server memory per session from /metrics
  mixed    senders at a steady rate, a big group, members dropping and reconnecting
  interactive  P senders with one send in flight each (wait for sent, send
           the next), each the only sender of its group of M other online
           members; server CPU and write system calls per message
  all      each of the above, each on a fresh embedded server
  growth   for each --growth-sizes database (made once by imserver populate in
           --growth-dir): startup, idle RSS, the conversation list of a user in
           300 conversations, send flat out, send at 10k/s, catchup; a table
           and, with --plot, an SVG

Size flags left at 0 take the scenario's default. Every scenario ends with the
correctness line: expected, received, lost, duplicated, order violations; the
command fails if any of them is off.`,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			f := cmd.Flags()
			if f.Changed("url") && f.Changed("embedded") && o.Embedded {
				return errors.New("--url and --embedded exclude each other")
			}
			if !f.Changed("embedded") {
				o.Embedded = o.URL == ""
			}
			o.RateSet = f.Changed("rate")
			o.InflightSet = f.Changed("inflight")
			o.Stdout, o.Stderr = cmd.OutOrStdout(), cmd.ErrOrStderr()
			if growthSizes != "" {
				var err error
				if o.Growth.Sizes, err = ParseSizes(growthSizes); err != nil {
					return fmt.Errorf("--growth-sizes: %w", err)
				}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			_, err := Run(ctx, o)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&growthSizes, "growth-sizes", "0,1M,10M", "growth: database sizes in messages")
	f.StringVar(&o.Growth.Dir, "growth-dir", "", "growth: where the populated databases are made and kept (default $TMPDIR/imserver-growth)")
	f.StringVar(&o.Growth.Plot, "plot", "", "growth: write an SVG plot here")
	f.IntVar(&o.Growth.Rounds, "growth-rounds", 1, "growth: measure every size this many times, in turn, and report the medians")
	f.StringVar(&o.URL, "url", "", "base URL of a running server, e.g. http://127.0.0.1:8080; several nodes of one cluster comma-separated: sessions connect to them in turn (session i to node i mod n), setup and /metrics use the first")
	f.BoolVar(&o.Embedded, "embedded", true, "start a server on a temporary database (default when --url is empty)")
	f.StringVar(&o.ServerBin, "server-bin", "", "imserver binary for --embedded (default: this executable)")
	f.StringVar(&o.MetricsToken, "metrics-token", os.Getenv("IMSERVER_METRICS_TOKEN"), "bearer token for GET /metrics of a --url server or a --server-config one (its metrics.token, or an admin's token; default $IMSERVER_METRICS_TOKEN)")
	f.StringVar(&o.ServerConfig, "server-config", "", "config file for --embedded instead of the bench's (keep its raised limits; --sqlite-sync is then ignored)")
	f.IntVar(&o.ServerPID, "server-pid", 0, "process id of the --url server: its CPU time and write system calls per message are read from /proc")
	f.StringVar(&o.Scenario, "scenario", "all", "send|fanout|catchup|idle|mixed|interactive|all|growth")
	f.IntVar(&o.Sizes.Users, "users", 0, "users to register")
	f.IntVar(&o.Sizes.Groups, "groups", 0, "groups to create")
	f.IntVar(&o.Sizes.Members, "members", 0, "members per group")
	f.IntVar(&o.Sizes.Sessions, "sessions", 0, "WebSocket sessions (session i belongs to user i mod users)")
	f.IntVar(&o.Sizes.Senders, "senders", 0, "sessions that send")
	f.IntVar(&o.Sizes.Messages, "messages", 0, "messages to send in all (catchup: messages that arrive while offline)")
	f.Float64Var(&o.Sizes.Rate, "rate", 0, "messages/s over all senders; 0 = flat out (default flat out; mixed: 2000)")
	f.DurationVar(&o.Sizes.Duration, "duration", 0, "stop sending after this long (mixed: default 10s)")
	f.IntVar(&o.BodySize, "body-size", 64, "message body bytes")
	f.StringVar(&o.Body, "body", "pad", "pad: the body's timestamp padded with x (every body shares its words); words: followed by words drawn from a 4,000-word vocabulary by Zipf's law, as people write")
	f.StringVar(&o.Mix, "mix", "", "team: 10% reactions, 3% edits, 1% deletes among the sends, checked folded at the end (default in mixed); none: text only")
	f.IntVar(&o.Inflight, "inflight", 100, "unanswered sends allowed per sender")
	f.StringVar(&o.SQLiteSync, "sqlite-sync", "FULL", "FULL|NORMAL: sqlite.synchronous of the embedded server")
	f.BoolVar(&o.JSON, "json", false, "print the results as JSON instead of a table")
	f.BoolVar(&o.Progress, "progress", true, "print a live progress line to stderr")
	f.BoolVar(&o.KeepTmp, "keep-tmp", false, "keep the embedded server's temporary directory (database, config, log)")
	f.DurationVar(&o.DrainTimeout, "drain-timeout", 10*time.Second, "wait this long without progress for outstanding answers and deliveries")
	f.IntVar(&o.Typists, "typists", 0, "send/fanout: this many more users online in one group of their own, each sending a typing frame every --typing-every")
	f.DurationVar(&o.TypingEvery, "typing-every", 3*time.Second, "how often each typist sends a typing frame (the server relays at most one per 3s per typist)")
	f.StringVar(&o.CPUProfile, "cpuprofile", "", "write the bench's own CPU profile here (to see what the load generator costs)")
	return cmd
}

// Run runs the chosen scenarios and prints their report. It returns the
// results, and an error if a scenario could not run or its correctness line
// is not clean.
func Run(ctx context.Context, o Options) ([]*Result, error) {
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.Stderr == nil {
		o.Stderr = io.Discard
	}
	if o.BodySize <= 0 {
		o.BodySize = 64
	}
	if o.Inflight <= 0 {
		o.Inflight = 100
	}
	switch o.Body {
	case "":
		o.Body = "pad"
	case "pad", "words":
	default:
		return nil, fmt.Errorf("bench: --body %q: want pad or words", o.Body)
	}
	switch o.Mix {
	case "", "team", "none":
	default:
		return nil, fmt.Errorf("--mix must be team or none, not %q", o.Mix)
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = 10 * time.Second
	}
	o.SQLiteSync = strings.ToUpper(o.SQLiteSync)
	if o.SQLiteSync == "" {
		o.SQLiteSync = "FULL"
	}
	if o.SQLiteSync != "FULL" && o.SQLiteSync != "NORMAL" {
		return nil, fmt.Errorf("--sqlite-sync %q: want FULL or NORMAL", o.SQLiteSync)
	}
	if o.URL == "" && !o.Embedded {
		return nil, errors.New("need --url or --embedded")
	}
	if o.URL != "" {
		o.Embedded = false
	}
	if o.Embedded && o.ServerBin == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("--server-bin: %w", err)
		}
		o.ServerBin = exe
	}
	if o.CPUProfile != "" {
		f, err := os.Create(o.CPUProfile)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, err
		}
		defer pprof.StopCPUProfile()
	}
	if o.Scenario == "growth" {
		if o.URL != "" {
			return nil, errors.New("--scenario growth starts its own servers; it takes no --url")
		}
		rows, err := runGrowth(ctx, o)
		if o.JSON {
			if jerr := writeJSONValue(o.Stdout, rows); jerr != nil && err == nil {
				err = jerr
			}
		}
		for _, r := range rows {
			if len(r.Errors) > 0 && err == nil {
				err = fmt.Errorf("bench: growth at %d messages: %s", r.Messages, strings.Join(r.Errors, "; "))
			}
		}
		return nil, err
	}
	var list []*scenario
	if o.Scenario == "all" || o.Scenario == "" {
		list = scenarios
	} else {
		sc := findScenario(o.Scenario)
		if sc == nil {
			return nil, fmt.Errorf("--scenario %q: want one of %s or all", o.Scenario, scenarioNames())
		}
		list = []*scenario{sc}
	}
	rep := &Report{Started: time.Now().UTC(), Machine: thisMachine(), Command: strings.Join(os.Args, " ")}
	var failed []string
	for _, sc := range list {
		res := runScenario(ctx, o, sc)
		rep.Results = append(rep.Results, res)
		switch {
		case res.Error != "":
			failed = append(failed, sc.name+": "+res.Error)
		case !res.Correctness.OK():
			failed = append(failed, fmt.Sprintf("%s: correctness: %+v", sc.name, res.Correctness))
		case len(res.Deviations) > 0:
			failed = append(failed, fmt.Sprintf("%s: %d protocol deviations", sc.name, len(res.Deviations)))
		case len(res.SendErrors) > 0:
			// The figures would describe a smaller load than asked for.
			failed = append(failed, fmt.Sprintf("%s: %d sends refused (%s); an embedded server raises the limits, a --url one may need limits.send_rate raised",
				sc.name, countSum(res.SendErrors), res.SendErrors[0].What))
		}
		if ctx.Err() != nil {
			break
		}
	}
	if o.JSON {
		if err := writeJSON(o.Stdout, rep); err != nil {
			return rep.Results, err
		}
	} else {
		writeTable(o.Stdout, rep)
	}
	if len(failed) > 0 {
		return rep.Results, fmt.Errorf("bench: %s", strings.Join(failed, "; "))
	}
	return rep.Results, nil
}

// runScenario runs one scenario on its own server (embedded) or on --url.
func runScenario(ctx context.Context, o Options, sc *scenario) *Result {
	sz := o.sizesFor(sc)
	if !o.InflightSet && sc.inflight > 0 {
		o.Inflight = sc.inflight
	}
	res := &Result{Scenario: sc.name, Sizes: sz, BodySize: o.BodySize, Body: o.Body, Inflight: o.Inflight}
	pid := o.ServerPID
	urls := strings.Split(o.URL, ",")
	base := urls[0]
	var srv *embeddedServer
	if o.Embedded {
		res.Server, res.SQLite = "embedded", o.SQLiteSync
		var err error
		cfg := serverConfig(o.SQLiteSync)
		if o.ServerConfig != "" {
			b, err := os.ReadFile(o.ServerConfig)
			if err != nil {
				res.Error = err.Error()
				return res
			}
			cfg, res.SQLite = string(b), ""
		}
		srv, err = startEmbedded(ctx, o.ServerBin, cfg, o.KeepTmp)
		if err != nil {
			res.Error = err.Error()
			return res
		}
		base = srv.url
		pid = srv.cmd.Process.Pid
		if o.KeepTmp {
			fmt.Fprintf(o.Stderr, "%s: embedded server in %s\n", sc.name, srv.dir)
		}
	} else {
		res.Server = o.URL
	}
	r := newRun(sc.name, o, sz, o.apiClient(base))
	if srv != nil && o.ServerConfig == "" {
		if err := r.api.signInAdmin(ctx); err != nil {
			res.Error = err.Error()
			return res
		}
	}
	if !o.Embedded {
		for _, u := range urls[1:] {
			r.nodes = append(r.nodes, o.apiClient(u))
		}
	}
	r.serverPID = pid
	var prog *progress
	if o.Progress {
		prog = startProgress(o.Stderr, r)
	}
	rctx, cancel := context.WithCancel(ctx)
	err := sc.run(rctx, r, res)
	r.closeAll()
	cancel()
	if prog != nil {
		prog.close()
	}
	r.finish(res)
	if err != nil {
		res.Error = err.Error()
	}
	if srv != nil {
		if err := srv.stop(); err != nil && res.Error == "" {
			res.Notes = append(res.Notes, Count{What: "embedded server: " + err.Error(), N: 1})
		}
	}
	return res
}

func (o Options) sizesFor(sc *scenario) Sizes {
	d, s := sc.defaults, o.Sizes
	pick := func(v, def int) int {
		if v > 0 {
			return v
		}
		return def
	}
	out := Sizes{
		Users:    pick(s.Users, d.Users),
		Groups:   pick(s.Groups, d.Groups),
		Members:  pick(s.Members, d.Members),
		Sessions: pick(s.Sessions, d.Sessions),
		Senders:  pick(s.Senders, d.Senders),
		Messages: pick(s.Messages, d.Messages),
		Rate:     d.Rate,
		Duration: d.Duration,
	}
	if o.RateSet || s.Rate > 0 {
		out.Rate = s.Rate
	}
	if s.Duration > 0 {
		out.Duration = s.Duration
	}
	if sc.adjust != nil {
		sc.adjust(&out, s)
	}
	return out
}
