package bench

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/imserver/imserver/bench/populate"
)

// The growth run measures how the server's costs grow with its data: for
// each database size it makes (once, with `imserver populate`) a history of
// that many messages, then starts the server on a copy of it and measures
// what DESIGN.md budgets on an empty one, plus startup, idle memory and
// bytes on disk. The scenarios run against the server over the protocol,
// in conversations of their own, beside the history.

// GrowthOptions configure the growth run.
type GrowthOptions struct {
	Sizes []int  // messages in the history; the first is the baseline
	Dir   string // where the histories are made and kept between runs
	Plot  string // SVG file to write ("" for none)
	// Starts is how many times startup is timed (the median is reported).
	Starts int
	// Lists is how many times the conversation list is fetched.
	Lists int
	// Rounds is how many times every size is measured (the figures are
	// the medians); 1 by default.
	Rounds int
}

// GrowthRow is one database size's figures.
type GrowthRow struct {
	Messages    int     `json:"messages"`
	DBBytes     int64   `json:"db_bytes"`
	BytesPerMsg float64 `json:"bytes_per_message"`
	StartupSec  float64 `json:"startup_seconds"` // median
	StartupMax  float64 `json:"startup_seconds_max"`
	IdleRSS     float64 `json:"idle_rss_bytes"`
	ListSec     float64 `json:"list_seconds"` // median of GET /conversations?since=0
	ListColdSec float64 `json:"list_cold_seconds"`
	ListEntries int     `json:"list_entries"`
	// SearchMs and SearchP99ms time two-word searches of the populated
	// user over all its conversations (the history's common words: many
	// hits, the first page of 20 returned).
	SearchMs     float64 `json:"search_ms"`
	SearchP99ms  float64 `json:"search_p99_ms"`
	SendsPerSec  float64 `json:"sends_per_sec"`
	DeliverP99ms float64 `json:"deliver_p99_ms"` // at 10k msgs/s
	CatchupSec   float64 `json:"catchup_seconds"`
	// HistoryAppendsPerSec is `imserver populate --more` on the history:
	// the store's durable appends (FULL) into the history's own
	// conversations, random client ids and all, beside no server.
	HistoryAppendsPerSec float64 `json:"history_appends_per_sec"`
	Errors               []string
}

// ParseSizes reads "0,1M,10M" (k and M suffixes allowed).
func ParseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		mult := 1
		switch {
		case strings.HasSuffix(f, "M"):
			mult, f = 1000000, strings.TrimSuffix(f, "M")
		case strings.HasSuffix(f, "k"):
			mult, f = 1000, strings.TrimSuffix(f, "k")
		}
		n, err := strconv.ParseFloat(f, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("size %q: want a number of messages such as 0, 500k or 10M", f)
		}
		out = append(out, int(n*float64(mult)))
	}
	return out, nil
}

func runGrowth(ctx context.Context, o Options) ([]GrowthRow, error) {
	g := o.Growth
	if len(g.Sizes) == 0 {
		g.Sizes = []int{0, 1000000, 10000000}
	}
	if g.Dir == "" {
		g.Dir = filepath.Join(os.TempDir(), "imserver-growth")
	}
	if g.Starts <= 0 {
		g.Starts = 5
	}
	if g.Lists <= 0 {
		g.Lists = 20
	}
	if err := os.MkdirAll(g.Dir, 0o755); err != nil {
		return nil, err
	}
	if g.Rounds <= 0 {
		g.Rounds = 1
	}
	// Rounds go over every size in turn (0, 1M, 10M, 0, 1M, 10M...), each
	// on a fresh copy of its history, so that a slow minute of a shared
	// machine's disk or CPU lands on one size's round, not on all of one
	// size's figures; each figure is the median over the rounds.
	runs := make([][]GrowthRow, len(g.Sizes))
	for r := 1; r <= g.Rounds; r++ {
		for i, n := range g.Sizes {
			if g.Rounds > 1 {
				fmt.Fprintf(o.Stderr, "growth: round %d of %d, %d messages\n", r, g.Rounds, n)
			}
			row, err := growthRow(ctx, o, g, n)
			if err != nil {
				return nil, err
			}
			runs[i] = append(runs[i], row)
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
		}
	}
	rows := make([]GrowthRow, len(g.Sizes))
	for i := range runs {
		rows[i] = medianRow(runs[i])
	}
	WriteGrowthTable(o.Stdout, rows)
	if g.Plot != "" {
		f, err := os.Create(g.Plot)
		if err != nil {
			return rows, err
		}
		WriteGrowthSVG(f, rows)
		if err := f.Close(); err != nil {
			return rows, err
		}
		fmt.Fprintf(o.Stderr, "growth: plot written to %s\n", g.Plot)
	}
	return rows, nil
}

// medianRow is one size's rounds as one row: each measured figure is the
// median of its rounds (the startup's worst is the worst of all), the
// rounds' errors all kept.
func medianRow(rounds []GrowthRow) GrowthRow {
	row := rounds[0]
	if len(rounds) == 1 {
		return row
	}
	med := func(f func(GrowthRow) float64) float64 {
		v := make([]float64, len(rounds))
		for i, r := range rounds {
			v[i] = f(r)
		}
		return median(v)
	}
	row.StartupSec = med(func(r GrowthRow) float64 { return r.StartupSec })
	row.IdleRSS = med(func(r GrowthRow) float64 { return r.IdleRSS })
	row.ListSec = med(func(r GrowthRow) float64 { return r.ListSec })
	row.ListColdSec = med(func(r GrowthRow) float64 { return r.ListColdSec })
	row.SendsPerSec = med(func(r GrowthRow) float64 { return r.SendsPerSec })
	row.DeliverP99ms = med(func(r GrowthRow) float64 { return r.DeliverP99ms })
	row.CatchupSec = med(func(r GrowthRow) float64 { return r.CatchupSec })
	row.SearchMs = med(func(r GrowthRow) float64 { return r.SearchMs })
	row.SearchP99ms = med(func(r GrowthRow) float64 { return r.SearchP99ms })
	row.HistoryAppendsPerSec = med(func(r GrowthRow) float64 { return r.HistoryAppendsPerSec })
	row.Errors = nil
	for _, r := range rounds {
		row.StartupMax = max(row.StartupMax, r.StartupMax)
		row.Errors = append(row.Errors, r.Errors...)
	}
	return row
}

// history returns the populated database of n messages, making it first
// if it is not in dir yet.
func history(ctx context.Context, o Options, dir string, n int) (string, error) {
	path := filepath.Join(dir, fmt.Sprintf("history-%d.db", n))
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	tmp := path + ".making"
	for _, p := range []string{tmp, tmp + "-wal", tmp + "-shm"} {
		os.Remove(p)
	}
	fmt.Fprintf(o.Stderr, "growth: populating %s with %d messages\n", path, n)
	cmd := exec.CommandContext(ctx, o.ServerBin, "populate", "--db", tmp, "--messages", strconv.Itoa(n))
	cmd.Stdout, cmd.Stderr = o.Stderr, o.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("populate %d: %w", n, err)
	}
	return path, os.Rename(tmp, path)
}

func copyFile(dst, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	// Written through before anything is measured: gigabytes of the copy
	// still dirty in the page cache are written back during the first
	// measurements, and every fsync of the server's WAL waits behind them
	// (10M: 15–26k appends/s right after an unsynced copy, 31–34k after).
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

func growthRow(ctx context.Context, o Options, g GrowthOptions, n int) (GrowthRow, error) {
	row := GrowthRow{Messages: n}
	src, err := history(ctx, o, g.Dir, n)
	if err != nil {
		return row, err
	}
	row.DBBytes = populate.FileBytes(src)
	if n > 0 {
		row.BytesPerMsg = float64(row.DBBytes) / float64(n)
	}
	// The scenarios add messages and users: they run on a copy, so that
	// the history stays the same for the next run.
	work := filepath.Join(g.Dir, fmt.Sprintf("work-%d.db", n))
	defer func() {
		for _, p := range []string{work, work + "-wal", work + "-shm"} {
			os.Remove(p)
		}
	}()
	fmt.Fprintf(o.Stderr, "growth %d: copying the history\n", n)
	if err := copyFile(work, src); err != nil {
		return row, err
	}

	var starts []float64
	for i := 0; i < g.Starts; i++ {
		srv, err := startEmbeddedOn(ctx, o.ServerBin, growthServerConfig(o), work, false)
		if err != nil {
			return row, err
		}
		starts = append(starts, srv.startup.Seconds())
		if err := srv.stop(); err != nil {
			return row, err
		}
	}
	row.StartupSec, row.StartupMax = median(starts), max(starts[0], starts[len(starts)-1])
	for _, s := range starts {
		row.StartupMax = max(row.StartupMax, s)
	}
	fmt.Fprintf(o.Stderr, "growth %d: startup %v (median of %d)\n", n, row.StartupSec, g.Starts)

	// The history's own conversations take more messages first (the
	// store alone, on the history as populated).
	if err := historyAppends(ctx, o, work, &row); err != nil {
		return row, err
	}
	fmt.Fprintf(o.Stderr, "growth %d: %.0f appends/s into the history's conversations\n", n, row.HistoryAppendsPerSec)

	srv, err := startEmbeddedOn(ctx, o.ServerBin, growthServerConfig(o), work, false)
	if err != nil {
		return row, err
	}
	defer srv.stop()
	api := o.apiClient(srv.url)
	// Idle memory first: what the server holds with the history on disk
	// and nothing asked of it yet, once the start's garbage is collected
	// (read from /proc: signing in to read /metrics would hash a password).
	time.Sleep(2 * time.Second)
	if rss, err := procRSS(srv.cmd.Process.Pid); err == nil {
		row.IdleRSS = rss
	}
	if o.ServerConfig == "" {
		if err := api.signInAdmin(ctx); err != nil {
			return row, err
		}
	}

	var login struct {
		Token string `json:"token"`
	}
	if err := api.do(ctx, "POST", "/api/v1/auth/login", "", map[string]string{"username": populate.Username(0), "password": populate.Password}, &login, 0); err != nil {
		return row, fmt.Errorf("logging in as the populated user: %w", err)
	}
	var lists []float64
	for i := 0; i < g.Lists; i++ {
		var out struct {
			Conversations []struct {
				ID string `json:"id"`
			} `json:"conversations"`
		}
		t0 := time.Now()
		if err := api.do(ctx, "GET", "/api/v1/conversations?since=0&limit=1000", login.Token, nil, &out, 200); err != nil {
			return row, err
		}
		d := time.Since(t0).Seconds()
		if i == 0 {
			row.ListColdSec = d
		} else {
			lists = append(lists, d)
		}
		row.ListEntries = len(out.Conversations)
	}
	row.ListSec = median(lists)
	fmt.Fprintf(o.Stderr, "growth %d: idle RSS %.1f MiB, list of %d conversations %.1f ms (cold %.1f ms)\n",
		n, row.IdleRSS/(1<<20), row.ListEntries, row.ListSec*1000, row.ListColdSec*1000)

	var searches []float64
	for _, q := range populate.SearchTerms(growthSearches, 1) {
		t0 := time.Now()
		if err := api.do(ctx, "GET", "/api/v1/search?q="+url.QueryEscape(q), login.Token, nil, nil, 200); err != nil {
			return row, fmt.Errorf("search %q: %w", q, err)
		}
		searches = append(searches, float64(time.Since(t0))/float64(time.Millisecond))
	}
	sort.Float64s(searches)
	row.SearchMs, row.SearchP99ms = median(searches), searches[len(searches)*99/100]
	fmt.Fprintf(o.Stderr, "growth %d: two-word search %.1f ms median, %.1f ms p99\n", n, row.SearchMs, row.SearchP99ms)

	sub := o
	sub.URL, sub.Embedded, sub.MetricsToken = srv.url, false, api.metricsToken
	sub.Growth = GrowthOptions{}
	sub.Sizes = Sizes{}
	sub.RateSet = false
	run := func(sc *scenario, sz Sizes, rateSet bool) *Result {
		so := sub
		so.Sizes, so.RateSet = sz, rateSet
		res := runScenario(ctx, so, sc)
		if res.Error != "" {
			row.Errors = append(row.Errors, sc.name+": "+res.Error)
		} else if !res.Correctness.OK() {
			row.Errors = append(row.Errors, fmt.Sprintf("%s: correctness %+v", sc.name, res.Correctness))
		}
		return res
	}
	res := run(sendScenario, Sizes{}, false)
	row.SendsPerSec = res.SendsPerSec
	fmt.Fprintf(o.Stderr, "growth %d: %.0f durable sends/s\n", n, row.SendsPerSec)
	res = run(sendScenario, Sizes{Rate: 10000, Duration: 10 * time.Second}, true)
	row.DeliverP99ms = res.Latency.P99
	fmt.Fprintf(o.Stderr, "growth %d: deliver p99 %.1f ms at %.0f sends/s\n", n, row.DeliverP99ms, res.SendsPerSec)
	res = run(catchupScenario, Sizes{}, false)
	if res.Catchup != nil {
		row.CatchupSec = res.Catchup.Seconds
	}
	fmt.Fprintf(o.Stderr, "growth %d: catch-up of 10k in %.3f s\n", n, row.CatchupSec)
	return row, nil
}

// growthServerConfig is the bench's server configuration, or the file
// --server-config names.
func growthServerConfig(o Options) string {
	if o.ServerConfig != "" {
		if b, err := os.ReadFile(o.ServerConfig); err == nil {
			return string(b)
		}
	}
	return serverConfig(o.SQLiteSync)
}

// historyAppends is the rate of `imserver populate --more` on db.
func historyAppends(ctx context.Context, o Options, db string, row *GrowthRow) error {
	cmd := exec.CommandContext(ctx, o.ServerBin, "populate", "--more", "--db", db, "--messages", strconv.Itoa(historyAppendMessages),
		"--sqlite-sync", o.SQLiteSync)
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("populate --more: %w", err)
	}
	// "... in 11.7s (8540 msgs/s), ..."
	s := string(out)
	i := strings.Index(s, " msgs/s)")
	j := strings.LastIndex(s[:max(i, 0)], "(")
	if i < 0 || j < 0 {
		return fmt.Errorf("populate --more: unexpected output %q", s)
	}
	row.HistoryAppendsPerSec, err = strconv.ParseFloat(s[j+1:i], 64)
	return err
}

// growthSearches is how many searches are timed per size.
const growthSearches = 200

// historyAppendMessages is what populate --more appends per size.
const historyAppendMessages = 100000

// humanCount writes 10000000 as 10M.
func humanCount(n int) string {
	switch {
	case n >= 1000000 && n%100000 == 0:
		return strconv.FormatFloat(float64(n)/1e6, 'f', -1, 64) + "M"
	case n >= 1000 && n%100 == 0:
		return strconv.FormatFloat(float64(n)/1e3, 'f', -1, 64) + "k"
	}
	return strconv.Itoa(n)
}

// WriteGrowthTable prints the rows as a Markdown table.
func WriteGrowthTable(w io.Writer, rows []GrowthRow) {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| messages\t appends/s into the history\t durable sends/s\t deliver p99 @10k/s\t catch-up 10k\t list of 300 (cold)\t search p50 / p99\t startup\t idle RSS\t database\t bytes/msg\t")
	fmt.Fprintln(tw, "|---\t---\t---\t---\t---\t---\t---\t---\t---\t---\t---\t")
	for _, r := range rows {
		bpm := "–"
		if r.Messages > 0 {
			bpm = fmt.Sprintf("%.0f", r.BytesPerMsg)
		}
		fmt.Fprintf(tw, "| %s\t %.0f\t %.0f\t %.1f ms\t %.3f s\t %.1f ms (%.1f ms)\t %.1f / %.1f ms\t %.0f ms\t %.1f MiB\t %.0f MiB\t %s\t\n",
			humanCount(r.Messages), r.HistoryAppendsPerSec, r.SendsPerSec, r.DeliverP99ms, r.CatchupSec, r.ListSec*1000, r.ListColdSec*1000,
			r.SearchMs, r.SearchP99ms, r.StartupSec*1000, r.IdleRSS/(1<<20), float64(r.DBBytes)/(1<<20), bpm)
	}
	tw.Flush()
	for _, r := range rows {
		for _, e := range r.Errors {
			fmt.Fprintf(w, "%s messages: %s\n", humanCount(r.Messages), e)
		}
	}
}

// growthSeries are the plotted figures, each relative to the first row.
var growthSeries = []struct {
	name, color string
	get         func(GrowthRow) float64
}{
	{"durable sends/s", "#1f77b4", func(r GrowthRow) float64 { return r.SendsPerSec }},
	{"appends/s into the history", "#17becf", func(r GrowthRow) float64 { return r.HistoryAppendsPerSec }},
	{"deliver p99 at 10k/s", "#ff7f0e", func(r GrowthRow) float64 { return r.DeliverP99ms }},
	{"catch-up of 10k", "#2ca02c", func(r GrowthRow) float64 { return r.CatchupSec }},
	{"conversation list", "#d62728", func(r GrowthRow) float64 { return r.ListSec }},
	{"search, two words", "#e377c2", func(r GrowthRow) float64 { return r.SearchMs }},
	{"startup", "#9467bd", func(r GrowthRow) float64 { return r.StartupSec }},
	{"idle RSS", "#8c564b", func(r GrowthRow) float64 { return r.IdleRSS }},
}

// WriteGrowthSVG draws each figure relative to the smallest database's
// (1 = no growth), with the targets' bounds: sends/s at least 0.85, times
// at most 2.
func WriteGrowthSVG(w io.Writer, rows []GrowthRow) {
	const W, H, left, right, top, bottom = 760, 420, 60, 210, 40, 50
	pw, ph := float64(W-left-right), float64(H-top-bottom)
	ymax := 2.5
	for _, s := range growthSeries {
		if len(rows) == 0 || s.get(rows[0]) == 0 {
			continue
		}
		for _, r := range rows {
			ymax = max(ymax, s.get(r)/s.get(rows[0]))
		}
	}
	ymax = float64(int(ymax*2+1)) / 2
	x := func(i int) float64 {
		if len(rows) < 2 {
			return left + pw/2
		}
		return left + pw*float64(i)/float64(len(rows)-1)
	}
	y := func(v float64) float64 { return top + ph*(1-v/ymax) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", W, H, W, H)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", W, H)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="14">imserver: cost as the database grows (relative to the smallest database; 1 = flat)</text>`+"\n", left)
	for v := 0.0; v <= ymax+1e-9; v += 0.5 {
		fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#eee"/><text x="%d" y="%.1f" text-anchor="end">%.1f×</text>`+"\n",
			left, left+pw, y(v), y(v), left-6, y(v)+4, v)
	}
	for _, t := range []struct {
		v     float64
		label string
	}{{0.85, "0.85: sends/s floor"}, {2, "2×: time ceiling"}} {
		fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#999" stroke-dasharray="5,4"/><text x="%d" y="%.1f" fill="#666">%s</text>`+"\n",
			left, left+pw, y(t.v), y(t.v), left+4, y(t.v)-4, t.label)
	}
	for i, r := range rows {
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%.1f" stroke="#ccc"/><text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n",
			x(i), x(i), top, top+ph, x(i), top+ph+18, humanCount(r.Messages))
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">messages in the database</text>`+"\n", left+pw/2, H-8)
	for k, s := range growthSeries {
		if len(rows) == 0 || s.get(rows[0]) == 0 {
			continue
		}
		var pts []string
		for i, r := range rows {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(i), y(s.get(r)/s.get(rows[0]))))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", s.color, strings.Join(pts, " "))
		for _, p := range pts {
			xy := strings.Split(p, ",")
			fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="3" fill="%s"/>`+"\n", xy[0], xy[1], s.color)
		}
		ly := top + 20 + 22*k
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="%s" stroke-width="2"/><text x="%.1f" y="%d">%s</text>`+"\n",
			left+pw+16, left+pw+40, ly, ly, s.color, left+pw+46, ly+4, s.name)
	}
	b.WriteString("</svg>\n")
	io.WriteString(w, b.String())
}
