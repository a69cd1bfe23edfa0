package seq

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// base is a realistic wall-clock time with a nanosecond part, so that the
// tests see the precision a real clock gives.
var base = time.Unix(1_732_000_000, 123_456_789)

// windowModel counts by brute force over every event ever recorded.
type windowModel struct {
	window time.Duration
	limit  int
	events map[string][]time.Time
}

func (m *windowModel) record(key string, now time.Time) int {
	m.events[key] = append(m.events[key], now)
	return m.count(key, now)
}

// count walks back from the newest event; events are recorded in time order
// and never lie after now, so the first one at or before now-window ends it.
func (m *windowModel) count(key string, now time.Time) int {
	evs := m.events[key]
	n := 0
	for i := len(evs) - 1; i >= 0 && evs[i].After(now.Add(-m.window)); i-- {
		n++
	}
	return min(n, m.limit)
}

// checkWindowModel drives w and the model with the same random operations.
// Time never goes back; the steps are chosen to land now exactly on, one
// nanosecond before and one after the moment a recorded event leaves the
// window, and to pile up events at a single instant.
func checkWindowModel(t *testing.T, w Window, window time.Duration, limit, ops int, seed uint64) {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, seed))
	m := &windowModel{window: window, limit: limit, events: map[string][]time.Time{}}
	keys := []string{"a", "b", "c"}
	now := base
	edges := 0
	for i := range ops {
		key := keys[rng.IntN(len(keys))]
		switch p := rng.IntN(100); {
		case p < 30:
			// Repeat the instant: ties must all count.
		case p < 60:
			now = now.Add(time.Duration(rng.Int64N(int64(window) / int64(limit))))
		case p < 70:
			now = now.Add(time.Duration(rng.Int64N(2 * int64(window))))
		default:
			// Move to an edge of a recorded event of this key, if one is ahead.
			evs := m.events[key]
			if len(evs) == 0 {
				break
			}
			edge := evs[len(evs)-1-rng.IntN(min(len(evs), limit+1))].Add(window)
			edge = edge.Add(time.Duration(rng.IntN(3) - 1)) // -1ns, exactly, +1ns
			if edge.After(now) {
				now = edge
				edges++
			}
		}
		var got, want int
		var err error
		op := "Record"
		if rng.IntN(4) == 0 {
			op = "Count"
			got, err = w.Count(ctx, key, now)
			want = m.count(key, now)
		} else {
			got, err = w.Record(ctx, key, now)
			want = m.record(key, now)
		}
		if err != nil {
			t.Fatalf("op %d: %s(%q, base+%v): %v", i, op, key, now.Sub(base), err)
		}
		if got != want {
			t.Fatalf("seed %d op %d: %s(%q, base+%v) = %d, want %d", seed, i, op, key, now.Sub(base), got, want)
		}
	}
	if edges < ops/100 {
		t.Errorf("only %d of %d ops landed on a window edge", edges, ops)
	}
}

func TestLocalWindowModel(t *testing.T) {
	for seed := range uint64(10) {
		for _, limit := range []int{1, 2, 5, 33} {
			t.Run(fmt.Sprintf("seed=%d/limit=%d", seed, limit), func(t *testing.T) {
				checkWindowModel(t, NewLocalWindow(time.Second, limit), time.Second, limit, 3000, seed)
			})
		}
	}
}

func TestLocalWindowEdges(t *testing.T) {
	ctx := context.Background()
	w := NewLocalWindow(time.Second, 3)
	check := func(what string, got int, err error, want int) {
		t.Helper()
		if err != nil || got != want {
			t.Errorf("%s: got %d, %v; want %d", what, got, err, want)
		}
	}
	n, err := w.Record(ctx, "g", base)
	check("first", n, err, 1)
	n, err = w.Count(ctx, "g", base.Add(time.Second-time.Nanosecond))
	check("event at now-window+1ns is in", n, err, 1)
	n, err = w.Count(ctx, "g", base.Add(time.Second))
	check("event at now-window is out", n, err, 0)
	for i := range 5 {
		n, err = w.Record(ctx, "g", base.Add(2*time.Second))
		check(fmt.Sprintf("burst %d", i), n, err, min(i+1, 3))
	}
	n, err = w.Count(ctx, "other", base.Add(2*time.Second))
	check("other key", n, err, 0)
}

func TestLocalWindowOutOfOrder(t *testing.T) {
	// Concurrent callers read the clock before taking the lock, so times
	// can arrive slightly out of order; the ring must stay sorted.
	ctx := context.Background()
	w := NewLocalWindow(time.Second, 4)
	for _, d := range []time.Duration{5, 3, 4, 1, 2} {
		if _, err := w.Record(ctx, "g", base.Add(d*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
	}
	// Full, and older than every kept event: it changes nothing, since by
	// the time the kept ones leave the window it has left too.
	if got, err := w.Record(ctx, "g", base); err != nil || got != 4 {
		t.Fatalf("late Record = %d, %v; want 4", got, err)
	}
	for _, c := range []struct {
		at   time.Duration
		want int
	}{
		{1000*time.Millisecond + 500*time.Microsecond, 4}, // five in the window, capped
		{1002 * time.Millisecond, 3},
		{1005 * time.Millisecond, 0},
	} {
		got, err := w.Count(ctx, "g", base.Add(c.at))
		if err != nil || got != c.want {
			t.Errorf("Count at +%v: got %d, %v; want %d", c.at, got, err, c.want)
		}
	}
}

func TestLocalWindowConcurrent(t *testing.T) {
	ctx := context.Background()
	const (
		goroutines = 8
		perG       = 2000
		limit      = 1000
	)
	w := NewLocalWindow(time.Hour, limit)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range perG {
				key := fmt.Sprintf("k%d", i%4)
				n, err := w.Record(ctx, key, time.Now())
				if err != nil || n < 1 || n > limit {
					t.Errorf("goroutine %d: Record = %d, %v", g, n, err)
					return
				}
				if i%10 == 0 {
					if _, err := w.Count(ctx, "shared", time.Now()); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	for k := range 4 {
		// 4000 events per key landed within the hour: the count is capped.
		got, err := w.Count(ctx, fmt.Sprintf("k%d", k), time.Now())
		if err != nil || got != limit {
			t.Errorf("k%d: got %d, %v; want %d", k, got, err, limit)
		}
	}
}

func TestLocalWindowEvictsIdleKeys(t *testing.T) {
	ctx := context.Background()
	w := NewLocalWindow(time.Second, 10)
	const keys = 10_000
	for i := range keys {
		if _, err := w.Record(ctx, fmt.Sprintf("idle%d", i), base); err != nil {
			t.Fatal(err)
		}
	}
	if got := w.keys(); got != keys {
		t.Fatalf("keys held = %d, want %d", got, keys)
	}
	// Later traffic on a few hot keys sweeps the idle ones away, once the
	// sweep has been round every shard.
	later := base.Add(2 * time.Second)
	for i := range 2 * windowShards * sweepInterval {
		if _, err := w.Record(ctx, fmt.Sprintf("hot%d", i%8), later); err != nil {
			t.Fatal(err)
		}
	}
	if got := w.keys(); got > 8 {
		t.Errorf("keys held after sweep = %d, want at most the 8 hot ones", got)
	}
	if got, _ := w.Count(ctx, "hot0", later); got != 10 {
		t.Errorf("hot0 count = %d, want 10", got)
	}
}

func TestLocalWindowRingShrinks(t *testing.T) {
	ctx := context.Background()
	w := NewLocalWindow(time.Second, 1000)
	for range 1000 {
		_, _ = w.Record(ctx, "g", base)
	}
	s := w.shard("g")
	if got := len(s.rings["g"].buf); got != 1000 {
		t.Fatalf("ring after a burst = %d slots, want 1000", got)
	}
	for i := range 20 {
		_, _ = w.Record(ctx, "g", base.Add(2*time.Second+time.Duration(i)*time.Second))
	}
	if got := len(s.rings["g"].buf); got > minRing {
		t.Errorf("ring of a quiet key = %d slots, want at most %d", got, minRing)
	}
}

func BenchmarkLocalWindowRecord(b *testing.B) {
	ctx := context.Background()
	w := NewLocalWindow(time.Second, 1001)
	keys := make([]string, 100)
	for i := range keys {
		keys[i] = fmt.Sprintf("group%d", i)
	}
	b.Run("serial", func(b *testing.B) {
		now := base
		i := 0
		for b.Loop() {
			now = now.Add(10 * time.Microsecond)
			if _, err := w.Record(ctx, keys[i%len(keys)], now); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			i := rand.IntN(len(keys))
			for pb.Next() {
				if _, err := w.Record(ctx, keys[i%len(keys)], time.Now()); err != nil {
					b.Error(err)
					return
				}
				i++
			}
		})
	})
}
