package chat

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/imserver/imserver/seq"
)

func TestStormHysteresis(t *testing.T) {
	cfg := StormConfig{Threshold: 10, LowerMark: 4}
	// Counts as a group's window sees them, and whether it storms after each.
	steps := []struct {
		count int
		want  bool
	}{
		{5, false}, {10, false}, // at the threshold is not above it
		{11, true}, {12, true},
		{9, true}, {4, true}, // at the lower mark it goes on
		{3, false},
		{10, false}, {5, false}, // below the threshold again: no storm
		{11, true}, {0, false},
	}
	was := false
	for i, s := range steps {
		got := cfg.storming(was, s.count)
		if got != s.want {
			t.Fatalf("step %d: storming(%v, %d): got %v, want %v", i, was, s.count, got, s.want)
		}
		was = got
	}
}

func TestStormConfigDefaults(t *testing.T) {
	off := StormConfig{}
	off.setDefaults()
	if off.Counter != nil || newStormMode(off) != nil {
		t.Fatal("threshold 0 should leave storm mode off")
	}
	c := StormConfig{Threshold: 100, LowerMark: 500}
	c.setDefaults()
	if c.LowerMark != 50 || c.Window != time.Minute || c.FlushInterval != 300*time.Millisecond || c.Counter == nil {
		t.Fatalf("defaults: got %+v", c)
	}
}

// recorder is an Observer that counts.
type recorder struct {
	started, ended, batches, pushed, dropped atomic.Int64
}

func (r *recorder) StormStarted(string, int)              { r.started.Add(1) }
func (r *recorder) StormEnded(string, int, time.Duration) { r.ended.Add(1) }
func (r *recorder) WindowCount(int)                       {}
func (r *recorder) StormBatch(int)                        { r.batches.Add(1) }
func (r *recorder) EventPushed(dropped int, err error) {
	r.pushed.Add(1)
	r.dropped.Add(int64(dropped))
}

// fakeWindow answers Count with a value the test sets.
type fakeWindow struct{ n atomic.Int64 }

func (w *fakeWindow) Record(context.Context, string, time.Time) (int, error) {
	return int(w.n.Add(1)), nil
}

func (w *fakeWindow) Count(context.Context, string, time.Time) (int, error) {
	return int(w.n.Load()), nil
}

// policyService is a Service with only what the storm policy uses.
func policyService(t *testing.T, w StormWindow) (*Service, *recorder, *seq.LocalQueue) {
	t.Helper()
	rec := &recorder{}
	q := seq.NewLocalQueue(100, time.Minute)
	cfg := Config{Storm: StormConfig{Threshold: 10, LowerMark: 4, Window: 2 * time.Second, Counter: w}, Events: q, Observer: rec}
	cfg.Storm.setDefaults()
	s := &Service{cfg: cfg, obs: rec, log: slog.New(slog.NewTextHandler(io.Discard, nil)), storm: newStormMode(cfg.Storm), stop: make(chan struct{})}
	t.Cleanup(func() { close(s.stop) })
	return s, rec, q
}

func takeChange(t *testing.T, s *Service) stormChange {
	t.Helper()
	select {
	case c := <-s.storm.changes:
		return c
	default:
		t.Fatal("no storm transition queued")
		return stormChange{}
	}
}

func noChange(t *testing.T, s *Service) {
	t.Helper()
	select {
	case c := <-s.storm.changes:
		t.Fatalf("unexpected transition %+v", c)
	default:
	}
}

func TestStormTransitionsAndAlerts(t *testing.T) {
	w := &fakeWindow{}
	s, rec, q := policyService(t, w)
	now := time.Now()
	for n := 1; n <= 10; n++ {
		s.updateStorm("g", n, now)
	}
	noChange(t, s)
	s.updateStorm("g", 11, now)
	if c := takeChange(t, s); !c.active || c.count != 11 || c.conv != "g" {
		t.Fatalf("start: got %+v", c)
	}
	s.updateStorm("g", 12, now)
	s.updateStorm("g", 4, now)
	noChange(t, s)

	// The monitor ends it when the count falls, with no send to notice.
	w.n.Store(3)
	s.checkStorms()
	if c := takeChange(t, s); c.active || c.count != 3 {
		t.Fatalf("end: got %+v", c)
	}
	s.checkStorms()
	noChange(t, s)

	if got, want := rec.started.Load(), int64(1); got != want {
		t.Errorf("storms started: got %d, want %d", got, want)
	}
	if got, want := rec.ended.Load(), int64(1); got != want {
		t.Errorf("storms ended: got %d, want %d", got, want)
	}
	payloads, _ := q.Take(context.Background(), EventsKey, 10)
	var types []string
	for _, p := range payloads {
		var a StormAlert
		if err := json.Unmarshal(p, &a); err != nil {
			t.Fatal(err)
		}
		if a.Conv != "g" || a.WindowMS != 2000 || a.Threshold != 10 || a.Since == 0 {
			t.Errorf("alert: got %+v", a)
		}
		types = append(types, a.Type)
	}
	if len(types) != 2 || types[0] != AlertStormStarted || types[1] != AlertStormEnded {
		t.Errorf("queued alerts: got %v, want [%s %s]", types, AlertStormStarted, AlertStormEnded)
	}
}

// Transitions reach the dispatcher in the order they happened, whoever
// makes them: starts and ends alternate.
func TestStormTransitionsAlternate(t *testing.T) {
	s, _, _ := policyService(t, &fakeWindow{})
	s.cfg.Events = nil
	s.storm.changes = make(chan stormChange, 100_000)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				n := 0
				if (i+g)%2 == 0 {
					n = 20
				}
				s.updateStorm("g", n, time.Now())
			}
		}(g)
	}
	wg.Wait()
	close(s.storm.changes)
	want := true
	n := 0
	for c := range s.storm.changes {
		if c.active != want {
			t.Fatalf("transition %d: active %v twice in a row", n, c.active)
		}
		want = !want
		n++
	}
	if n == 0 {
		t.Fatal("no transitions")
	}
}

// A storming group's buffer keeps seq order and splits where the
// recipients change, so that a member who joined mid-buffer gets only what
// it may see.
func TestStormBufferRuns(t *testing.T) {
	r := &cachedRoster{Roster: Roster{Conv: "g", Kind: Group, Members: []Member{
		{UserID: "a", MinSeq: 1}, {UserID: "b", MinSeq: 1}, {UserID: "c", MinSeq: 5},
	}}, ids: []string{"a", "b", "c"}, latestJoin: 5}
	r2 := &cachedRoster{Roster: Roster{Conv: "g", Kind: Group, Members: []Member{{UserID: "a", MinSeq: 1}}}, ids: []string{"a"}, latestJoin: 1}
	var b stormBuffer
	for seq := int64(3); seq <= 7; seq++ {
		b.add(r, Message{Conv: "g", Seq: seq})
	}
	b.add(r2, Message{Conv: "g", Seq: 8}) // b and c left
	type run struct {
		ids  int
		seqs []int64
	}
	var got []run
	for _, x := range b.runs {
		var seqs []int64
		for _, m := range x.msgs {
			seqs = append(seqs, m.Seq)
		}
		got = append(got, run{len(x.ids), seqs})
	}
	want := []run{{2, []int64{3, 4}}, {3, []int64{5, 6, 7}}, {1, []int64{8}}}
	if len(got) != len(want) {
		t.Fatalf("runs: got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].ids != want[i].ids || len(got[i].seqs) != len(want[i].seqs) {
			t.Fatalf("runs: got %+v, want %+v", got, want)
		}
		for j := range want[i].seqs {
			if got[i].seqs[j] != want[i].seqs[j] {
				t.Fatalf("runs: got %+v, want %+v", got, want)
			}
		}
	}
}

func TestIsAdmin(t *testing.T) {
	s := &Service{cfg: Config{Admins: []string{"root"}}}
	if !s.IsAdmin(User{Username: "root"}) || !s.IsAdmin(User{Username: "Root"}) || s.IsAdmin(User{Username: "rooted"}) || s.IsAdmin(User{}) {
		t.Fatal("IsAdmin")
	}
}
