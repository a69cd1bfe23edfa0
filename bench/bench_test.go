package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// serverBin is the imserver binary the scenario tests start, built once by
// TestMain (or given by IMSERVER_BENCH_SERVER_BIN).
var serverBin string

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	if bin := os.Getenv("IMSERVER_BENCH_SERVER_BIN"); bin != "" {
		serverBin = bin
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "imserver-bench-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "go env GOMOD:", err)
		return 1
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	serverBin = filepath.Join(dir, "imserver")
	build := exec.Command("go", "build", "-o", serverBin, "github.com/imserver/imserver")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the server: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// runTiny runs one scenario at a tiny size on an embedded server and checks
// the correctness line; timings are never asserted.
func runTiny(t *testing.T, scenario string, sz Sizes) *Result {
	t.Helper()
	return runTinyOpts(t, Options{Scenario: scenario, Sizes: sz})
}

// runTinyOpts is runTiny with more options (scenario and sizes in o).
func runTinyOpts(t *testing.T, o Options) *Result {
	t.Helper()
	var out bytes.Buffer
	o.Embedded, o.ServerBin, o.RateSet = true, serverBin, true
	o.DrainTimeout, o.Stdout = 10*time.Second, &out
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	results, err := Run(ctx, o)
	t.Logf("report:\n%s", out.String())
	if len(results) != 1 {
		t.Fatalf("got %d results, want 1 (err %v)", len(results), err)
	}
	res := results[0]
	if res.Error != "" {
		t.Fatalf("scenario error: %s", res.Error)
	}
	checkCorrect(t, res)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res
}

func checkCorrect(t *testing.T, res *Result) {
	t.Helper()
	c := res.Correctness
	if c.Lost != 0 || c.Duplicated != 0 || c.OrderViolations != 0 {
		t.Errorf("correctness: lost %d, duplicated %d, order violations %d; want 0, 0, 0", c.Lost, c.Duplicated, c.OrderViolations)
	}
	if c.Unexpected != 0 || c.SeqClashes != 0 || c.Unconfirmed != 0 {
		t.Errorf("correctness: unexpected %d, seq clashes %d, unconfirmed %d; want 0", c.Unexpected, c.SeqClashes, c.Unconfirmed)
	}
	if c.Expected == 0 || c.Received != c.Expected {
		t.Errorf("correctness: expected %d, received %d; want equal and > 0", c.Expected, c.Received)
	}
	if res.Sent == 0 {
		t.Errorf("sent = 0, want > 0")
	}
	for _, d := range res.Deviations {
		t.Errorf("protocol deviation (x%d): %s", d.N, d.What)
	}
	for _, e := range res.SendErrors {
		t.Errorf("send error (x%d): %s", e.N, e.What)
	}
}

func TestSend(t *testing.T) {
	res := runTiny(t, "send", Sizes{Users: 6, Groups: 3, Members: 3, Senders: 3, Messages: 60})
	if got, want := res.Sent, int64(60); got != want {
		t.Errorf("sent = %d, want %d", got, want)
	}
	// 3 groups of 3 members over 6 users: each message reaches 2 others.
	if got, want := res.Correctness.Expected, int64(120); got != want {
		t.Errorf("expected = %d, want %d", got, want)
	}
	if res.Delivered == 0 || res.Latency.Count == 0 {
		t.Errorf("delivered %d, latency samples %d; want > 0", res.Delivered, res.Latency.Count)
	}
}

// TestSendTypists runs typists beside the send scenario at the hostile rate
// of one typing frame per 100ms each: the sends stay correct, typing frames
// reach the other typists, and the server relays at most one per typist per
// 3 s (chat.TypingInterval), so far fewer arrive than were sent.
func TestSendTypists(t *testing.T) {
	start := time.Now()
	res := runTinyOpts(t, Options{Scenario: "send", Sizes: Sizes{Users: 6, Groups: 3, Members: 3, Senders: 3, Messages: 60, Rate: 30},
		Typists: 3, TypingEvery: 100 * time.Millisecond})
	elapsed := time.Since(start)
	var sent, received int
	for _, c := range res.Notes {
		switch {
		case strings.HasPrefix(c.What, "typing frames sent by 3 typists"):
			sent = c.N
		case strings.HasPrefix(c.What, "typing frames received"):
			received = c.N
		}
	}
	// Each typist's frames reach the 2 others, at most one per 3 s.
	bound := 3 * 2 * (int(elapsed/(3*time.Second)) + 1)
	if sent < 10 || received == 0 || received > bound {
		t.Errorf("typing frames sent %d, received %d; want sent >= 10, 0 < received <= %d (one per typist per 3 s to each of 2 others over %s)", sent, received, bound, elapsed)
	}
}

func TestFanout(t *testing.T) {
	res := runTiny(t, "fanout", Sizes{Users: 10, Senders: 2, Messages: 20})
	if got, want := res.Correctness.Expected, int64(20*9); got != want {
		t.Errorf("expected = %d, want %d", got, want)
	}
	if res.Delivered == 0 {
		t.Errorf("delivered = 0")
	}
}

func TestCatchup(t *testing.T) {
	// More than one page (limit 1000) so the pull has to page on.
	res := runTiny(t, "catchup", Sizes{Users: 3, Messages: 1500})
	c := res.Catchup
	if c == nil {
		t.Fatal("no catch-up figures")
	}
	if c.Members != 2 || c.Messages != 1500 || c.Pages < 2 {
		t.Errorf("catch-up: %d members pulled %d messages in %d pages; want 2, 1500, >= 2", c.Members, c.Messages, c.Pages)
	}
	if c.AfterSeqLow != catchupWarmup {
		t.Errorf("pull started after seq %d, want %d (the warm-up)", c.AfterSeqLow, catchupWarmup)
	}
	if res.ViaPull < 2*1500 {
		t.Errorf("via pull = %d, want >= %d", res.ViaPull, 2*1500)
	}
}

func TestIdle(t *testing.T) {
	res := runTiny(t, "idle", Sizes{Users: 5, Groups: 2, Members: 3, Sessions: 20, Senders: 2})
	m := res.Memory
	if m == nil {
		t.Fatal("no memory figures")
	}
	if m.Sessions != 20 || m.RSSAfter <= 0 {
		t.Errorf("memory: %d sessions, RSS after %v; want 20, > 0", m.Sessions, m.RSSAfter)
	}
	if m.GaugeSessions >= 0 && m.GaugeSessions != 20 {
		t.Logf("imserver_sessions = %v with 20 sessions open", m.GaugeSessions)
	}
}

func TestMixed(t *testing.T) {
	res := runTiny(t, "mixed", Sizes{Users: 12, Groups: 3, Members: 4, Senders: 3, Rate: 300, Duration: 2 * time.Second})
	if res.Delivered == 0 {
		t.Errorf("delivered = 0")
	}
}

// TestCommandJSON drives the cobra command against a running server (--url)
// and reads its --json output.
func TestCommandJSON(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := startEmbedded(ctx, serverBin, serverConfig("NORMAL"), false)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.stop()
	cmd := Command()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs([]string{"--url", srv.url, "--scenario", "send", "--users", "4", "--groups", "2", "--members", "2",
		"--senders", "2", "--messages", "20", "--json", "--progress=false"})
	if err := cmd.ExecuteContext(ctx); err != nil {
		t.Fatalf("bench: %v\nstderr: %s\nstdout: %s", err, errOut.String(), out.String())
	}
	var rep Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out.String())
	}
	if len(rep.Results) != 1 {
		t.Fatalf("%d results, want 1", len(rep.Results))
	}
	res := rep.Results[0]
	if res.Server != srv.url || res.Sizes.Users != 4 || res.Sizes.Messages != 20 {
		t.Errorf("result server %q sizes %+v; want %q, 4 users, 20 messages", res.Server, res.Sizes, srv.url)
	}
	checkCorrect(t, res)
}

func TestInteractive(t *testing.T) {
	// Enough messages that the server's CPU, which /proc counts in ticks
	// of 10 ms, cannot round down to none.
	const messages = 1000
	for _, users := range []int{4, 4 + 4*2} { // ring, then listeners of their own
		res := runTiny(t, "interactive", Sizes{Users: users, Senders: 4, Members: 2, Messages: messages})
		if res.Inflight != 1 {
			t.Errorf("users %d: in flight per sender = %d, want 1", users, res.Inflight)
		}
		// Every sender sends into its own group of itself and 2 others.
		if got, want := res.Correctness.Expected, int64(messages*2); got != want {
			t.Errorf("users %d: expected = %d, want %d", users, got, want)
		}
		if res.ServerCPUSec <= 0 || res.ServerWrites <= 0 || res.ServerReads <= 0 || res.ServerWritesPerMsg <= 0 {
			t.Errorf("users %d: server cpu %v s, write calls %d, read calls %d, writes/msg %v: want all > 0 (read from /proc)",
				users, res.ServerCPUSec, res.ServerWrites, res.ServerReads, res.ServerWritesPerMsg)
		}
		if res.MeasuredSec <= 0 || res.ServerCoreShare <= 0 {
			t.Errorf("users %d: measured %v s, core share %v; want > 0", users, res.MeasuredSec, res.ServerCoreShare)
		}
	}
}

func TestInteractiveGroups(t *testing.T) {
	ring := interactiveGroups(4, 4, 2)
	if fmt.Sprint(ring) != "[[0 1 2] [1 2 3] [2 3 0] [3 0 1]]" {
		t.Errorf("ring layout = %v", ring)
	}
	own := interactiveGroups(7, 2, 2)
	if fmt.Sprint(own) != "[[0 2 3] [1 4 5]]" {
		t.Errorf("listener layout = %v", own)
	}
}

func TestReadProcSelf(t *testing.T) {
	p, err := readProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if !p.ok || p.writes <= 0 || p.reads <= 0 {
		t.Errorf("readProc(self) = %+v, want ok with write and read calls counted", p)
	}
}
