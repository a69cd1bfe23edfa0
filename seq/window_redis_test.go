package seq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

func TestRedisWindowModel(t *testing.T) {
	r := startRedis(t)
	c := r.client()
	for seed := range uint64(3) {
		for _, limit := range []int{1, 5, 33} {
			t.Run(fmt.Sprintf("seed=%d/limit=%d", seed, limit), func(t *testing.T) {
				prefix := fmt.Sprintf("t%d:%d:", seed, limit)
				w := NewRedisWindow(c, prefix, time.Second, limit, time.Hour)
				checkWindowModel(t, w, time.Second, limit, 1500, seed)
			})
		}
	}
}

func TestRedisWindowEdges(t *testing.T) {
	ctx := context.Background()
	r := startRedis(t)
	c := r.client()
	w := NewRedisWindow(c, "e:", time.Second, 3, 0)
	check := func(what string, got int, err error, want int) {
		t.Helper()
		if err != nil || got != want {
			t.Errorf("%s: got %d, %v; want %d", what, got, err, want)
		}
	}
	n, err := w.Record(ctx, "g", base)
	check("first", n, err, 1)
	// Same microsecond as the event, one nanosecond apart: decided by the member, not the score.
	n, err = w.Count(ctx, "g", base.Add(time.Second-time.Nanosecond))
	check("event at now-window+1ns is in", n, err, 1)
	n, err = w.Count(ctx, "g", base.Add(time.Second))
	check("event at now-window is out", n, err, 0)
	for i := range 5 {
		n, err = w.Record(ctx, "g", base.Add(2*time.Second))
		check(fmt.Sprintf("burst %d", i), n, err, min(i+1, 3))
	}
	// The cap bounds memory: never more members than the limit.
	if got := c.ZCard(ctx, "e:win:{g}").Val(); got != 3 {
		t.Errorf("members stored = %d, want 3", got)
	}
	// keyTTL 0 was raised to the window.
	if ttl := c.PTTL(ctx, "e:win:{g}").Val(); ttl <= 0 || ttl > time.Second {
		t.Errorf("key TTL = %v, want (0, 1s]", ttl)
	}
	// Counting an absent key creates nothing.
	n, err = w.Count(ctx, "none", base)
	check("absent key", n, err, 0)
	if c.Exists(ctx, "e:win:{none}").Val() != 0 {
		t.Error("Count created a key")
	}
}

func TestRedisWindowSharedByTwoProcesses(t *testing.T) {
	ctx := context.Background()
	r := startRedis(t)
	w1 := NewRedisWindow(r.client(), "p:", time.Minute, 1000, time.Minute)
	w2 := NewRedisWindow(r.client(), "p:", time.Minute, 1000, time.Minute)
	var wg sync.WaitGroup
	for _, w := range []*RedisWindow{w1, w2, w1, w2} {
		wg.Go(func() {
			for range 100 {
				if _, err := w.Record(ctx, "g", time.Now()); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	got, err := w1.Count(ctx, "g", time.Now())
	if err != nil || got != 400 {
		t.Errorf("Count = %d, %v; want 400", got, err)
	}
}

func TestRedisWindowUnavailable(t *testing.T) {
	r := startRedis(t)
	w := NewRedisWindow(r.client(), "u:", time.Second, 3, 0)
	r.kill()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err := w.Record(ctx, "g", time.Now())
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Record with redis down: %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Record took %v to fail", d)
	}
}

func BenchmarkRedisWindowRecord(b *testing.B) {
	ctx := context.Background()
	r := startRedis(b)
	w := NewRedisWindow(r.client(), "b:", time.Second, 1001, time.Minute)
	keys := make([]string, 100)
	for i := range keys {
		keys[i] = fmt.Sprintf("group%d", i)
	}
	i := 0
	for b.Loop() {
		if _, err := w.Record(ctx, keys[i%len(keys)], time.Now()); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
