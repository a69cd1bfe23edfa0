package seq

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// memBounds is an in-memory Bounds that keeps the largest bound, as the
// SQLite one must.
type memBounds struct {
	mu         sync.Mutex
	bound      map[string]int64
	persists   int
	persistErr error
	// beforePersist, if set, runs inside Persist before the bound is stored.
	beforePersist func(conv string, bound int64)
}

func newMemBounds() *memBounds { return &memBounds{bound: map[string]int64{}} }

func (b *memBounds) Floor(_ context.Context, conv string) (int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.bound[conv], nil
}

func (b *memBounds) Persist(_ context.Context, conv string, bound int64) error {
	b.mu.Lock()
	hook, err := b.beforePersist, b.persistErr
	b.mu.Unlock()
	if hook != nil {
		hook(conv, bound)
	}
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.persists++
	b.bound[conv] = max(b.bound[conv], bound)
	return nil
}

func (b *memBounds) get(conv string) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.bound[conv]
}

// grant is one successful Alloc, with when it started and returned.
type grant struct {
	conv         string
	first, n     int64
	start, end   time.Time
	worker, call int
}

func (g grant) last() int64 { return g.first + g.n - 1 }

// allocChecked allocates and checks that the bound covering the seqs was
// persisted before Alloc returned them.
func allocChecked(t testing.TB, a *RedisAllocator, b *memBounds, conv string, n int64) (grant, error) {
	t.Helper()
	g := grant{conv: conv, n: n, start: time.Now()}
	first, err := a.Alloc(context.Background(), conv, n, false)
	g.end = time.Now()
	g.first = first
	if err == nil && g.last() > b.get(conv) {
		t.Errorf("Alloc(%q, %d) = %d before bound %d was persisted", conv, n, first, g.last())
	}
	return g, err
}

// checkGrants checks that no seq was handed out twice and that seqs never
// go back in real time: an Alloc that started after another returned got
// larger seqs, whichever process and whatever Redis went through between.
func checkGrants(t *testing.T, grants []grant) {
	t.Helper()
	byConv := map[string][]grant{}
	for _, g := range grants {
		byConv[g.conv] = append(byConv[g.conv], g)
	}
	for conv, gs := range byConv {
		seen := map[int64]bool{}
		for _, g := range gs {
			if g.first < 1 {
				t.Errorf("%s: seq %d below 1", conv, g.first)
			}
			for s := g.first; s <= g.last(); s++ {
				if seen[s] {
					t.Errorf("%s: seq %d handed out twice", conv, s)
				}
				seen[s] = true
			}
		}
		byEnd := slices.Clone(gs)
		sort.Slice(byEnd, func(i, j int) bool { return byEnd[i].end.Before(byEnd[j].end) })
		maxLast := make([]int64, len(byEnd)) // largest seq among the first i+1 to return
		for i, g := range byEnd {
			maxLast[i] = g.last()
			if i > 0 {
				maxLast[i] = max(maxLast[i], maxLast[i-1])
			}
		}
		for _, g := range gs {
			// The grants that returned before g started.
			i := sort.Search(len(byEnd), func(i int) bool { return !byEnd[i].end.Before(g.start) })
			if i > 0 && g.first <= maxLast[i-1] {
				t.Errorf("%s: worker %d call %d got %d, not above %d handed out before it started", conv, g.worker, g.call, g.first, maxLast[i-1])
			}
		}
	}
}

func TestRedisAllocSequential(t *testing.T) {
	r := startRedis(t)
	b := newMemBounds()
	a := NewRedisAllocator(r.client(), "s:", b, RedisAllocOptions{GroupBlock: 10, DirectBlock: 4})
	ctx := context.Background()
	for want := int64(1); want <= 25; want++ {
		got, err := a.Alloc(ctx, "g", 1, false)
		if err != nil || got != want {
			t.Fatalf("Alloc = %d, %v; want %d", got, err, want)
		}
	}
	if b.persists != 3 || b.get("g") != 30 {
		t.Errorf("persists = %d, bound = %d; want 3 blocks up to 30", b.persists, b.get("g"))
	}
	// Larger than a block: one block of exactly n, still consecutive.
	got, err := a.Alloc(ctx, "g", 12, false)
	if err != nil || got != 26 || b.get("g") != 30+12 {
		t.Errorf("Alloc(12) = %d, %v, bound %d; want 26 with bound 42", got, err, b.get("g"))
	}
	for want := int64(1); want <= 5; want++ {
		if got, err := a.Alloc(ctx, "d", 1, true); err != nil || got != want {
			t.Fatalf("direct Alloc = %d, %v; want %d", got, err, want)
		}
	}
	if b.get("d") != 8 {
		t.Errorf("direct bound = %d, want two blocks of 4", b.get("d"))
	}
	if _, err := a.Alloc(ctx, "g", 0, false); err == nil {
		t.Error("Alloc of 0 seqs succeeded")
	}
}

func TestRedisAllocConcurrent(t *testing.T) {
	r := startRedis(t)
	b := newMemBounds()
	// Two allocators with their own connections stand for two processes;
	// a small block makes most calls race for refills.
	opts := RedisAllocOptions{GroupBlock: 7}
	procs := []*RedisAllocator{
		NewRedisAllocator(r.client(), "c:", b, opts),
		NewRedisAllocator(r.client(), "c:", b, opts),
	}
	var mu sync.Mutex
	var grants []grant
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			var mine []grant
			for call := range 300 {
				conv := []string{"g1", "g2"}[rng.IntN(2)]
				g, err := allocChecked(t, procs[w%2], b, conv, 1+rng.Int64N(3))
				if err != nil {
					t.Error(err)
					return
				}
				g.worker, g.call = w, call
				mine = append(mine, g)
			}
			mu.Lock()
			grants = append(grants, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	if len(grants) != 8*300 {
		t.Fatalf("got %d grants", len(grants))
	}
	checkGrants(t, grants)
}

func TestRedisAllocFlushAll(t *testing.T) {
	r := startRedis(t)
	c := r.client()
	b := newMemBounds()
	opts := RedisAllocOptions{GroupBlock: 20}
	procs := []*RedisAllocator{NewRedisAllocator(r.client(), "f:", b, opts), NewRedisAllocator(r.client(), "f:", b, opts)}
	ctx := context.Background()

	var mu sync.Mutex
	var grants []grant
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for call := 0; ; call++ {
				select {
				case <-stop:
					return
				default:
				}
				g, err := allocChecked(t, procs[w%2], b, "g", 1)
				if err != nil {
					t.Error(err)
					return
				}
				g.worker, g.call = w, call
				mu.Lock()
				grants = append(grants, g)
				mu.Unlock()
			}
		})
	}
	for range 3 {
		time.Sleep(50 * time.Millisecond)
		if err := c.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond)
	close(stop)
	wg.Wait()
	if len(grants) < 100 {
		t.Fatalf("only %d grants", len(grants))
	}
	checkGrants(t, grants)

	// And the plain case: everything after a flush is above everything before.
	before, _ := allocChecked(t, procs[0], b, "g", 1)
	if err := c.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	after, err := allocChecked(t, procs[1], b, "g", 1)
	if err != nil || after.first <= before.first {
		t.Errorf("after FLUSHALL: %d, %v; want above %d", after.first, err, before.first)
	}
}

func TestRedisAllocFlushDuringPersist(t *testing.T) {
	// The refill lock and the key vanish while a refill persists its bound:
	// the refill must not install its block, and the retry must still land
	// above everything handed out.
	r := startRedis(t)
	c := r.client()
	b := newMemBounds()
	a := NewRedisAllocator(c, "p:", b, RedisAllocOptions{GroupBlock: 5})
	var grants []grant
	for range 10 { // two blocks used up: the next call refills
		g, err := allocChecked(t, a, b, "g", 1)
		if err != nil {
			t.Fatal(err)
		}
		grants = append(grants, g)
	}
	flushed := false
	b.beforePersist = func(string, int64) {
		if !flushed {
			flushed = true
			c.FlushAll(context.Background())
		}
	}
	g, err := allocChecked(t, a, b, "g", 1)
	if err != nil {
		t.Fatal(err)
	}
	if !flushed {
		t.Fatal("no refill happened")
	}
	grants = append(grants, g)
	checkGrants(t, grants)
}

func TestRedisAllocRedisRestart(t *testing.T) {
	r := startRedis(t)
	b := newMemBounds()
	a := NewRedisAllocator(r.client(), "r:", b, RedisAllocOptions{})
	var grants []grant
	for range 30 {
		g, err := allocChecked(t, a, b, "g", 2)
		if err != nil {
			t.Fatal(err)
		}
		grants = append(grants, g)
	}

	r.kill()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for range 3 {
		start := time.Now()
		_, err := a.Alloc(ctx, "g", 1, false)
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Alloc with redis down: %v, want ErrUnavailable", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("Alloc took %v to fail", d)
		}
	}

	r.restart()
	for range 30 {
		g, err := allocChecked(t, a, b, "g", 1)
		if err != nil {
			t.Fatal(err)
		}
		grants = append(grants, g)
	}
	checkGrants(t, grants)
}

func TestRedisAllocRespectsContextWhenRedisHangs(t *testing.T) {
	r := startRedis(t)
	a := NewRedisAllocator(r.client(), "h:", newMemBounds(), RedisAllocOptions{})
	if _, err := a.Alloc(context.Background(), "g", 1, false); err != nil {
		t.Fatal(err)
	}
	// A stopped server accepts nothing and answers nothing: only the
	// context can end the call.
	if err := r.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer r.cmd.Process.Signal(syscall.SIGCONT)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := a.Alloc(ctx, "g", 1, false)
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("Alloc against a hung redis: %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Alloc took %v with a 200ms deadline", d)
	}
}

func TestRedisAllocWaitsForAnotherRefill(t *testing.T) {
	r := startRedis(t)
	c := r.client()
	ctx := context.Background()
	b := newMemBounds()
	a := NewRedisAllocator(c, "w:", b, RedisAllocOptions{GroupBlock: 10, MaxWait: 100 * time.Millisecond})
	key := "w:seq:{g}"
	farFuture := time.Now().Add(time.Hour).UnixMilli()

	// Someone else holds the lock, but the block has room: served anyway.
	c.HSet(ctx, key, "CURR", 5, "LAST", 10, "LOCK", fmt.Sprintf("%d:other", farFuture))
	if got, err := a.Alloc(ctx, "g", 5, false); err != nil || got != 6 {
		t.Fatalf("Alloc while locked, room left = %d, %v; want 6", got, err)
	}

	// Block used up and the lock held: wait, then give up.
	start := time.Now()
	_, err := a.Alloc(ctx, "g", 1, false)
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Alloc behind a held lock: %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d < 100*time.Millisecond || d > time.Second {
		t.Errorf("gave up after %v, want about MaxWait", d)
	}

	// The holder finishes while we wait.
	go func() {
		time.Sleep(30 * time.Millisecond)
		b.Persist(ctx, "g", 20)
		c.HSet(ctx, key, "LAST", 20)
		c.HDel(ctx, key, "LOCK")
	}()
	if got, err := a.Alloc(ctx, "g", 1, false); err != nil || got != 11 {
		t.Fatalf("Alloc after the refill = %d, %v; want 11", got, err)
	}

	// A dead holder's lock lapses.
	c.HSet(ctx, key, "CURR", 20, "LOCK", fmt.Sprintf("%d:dead", time.Now().Add(-time.Second).UnixMilli()))
	if got, err := a.Alloc(ctx, "g", 1, false); err != nil || got != 21 {
		t.Fatalf("Alloc past a lapsed lock = %d, %v; want 21", got, err)
	}
	if got := c.HGet(ctx, key, "LAST").Val(); got != "30" {
		t.Errorf("LAST = %s, want 30", got)
	}
}

func TestRedisAllocPersistFailure(t *testing.T) {
	r := startRedis(t)
	c := r.client()
	ctx := context.Background()
	b := newMemBounds()
	a := NewRedisAllocator(c, "e:", b, RedisAllocOptions{MaxWait: 50 * time.Millisecond})
	disk := errors.New("disk full")
	b.persistErr = disk
	_, err := a.Alloc(ctx, "g", 1, false)
	if !errors.Is(err, disk) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("Alloc with failing Persist: %v, want the Persist error", err)
	}
	if c.HExists(ctx, "e:seq:{g}", "LOCK").Val() {
		t.Error("lock left behind after a failed refill")
	}
	b.persistErr = nil
	if got, err := a.Alloc(ctx, "g", 1, false); err != nil || got != 1 {
		t.Errorf("Alloc after Persist recovered = %d, %v; want 1", got, err)
	}
}

func TestRedisAllocScriptFlush(t *testing.T) {
	r := startRedis(t)
	c := r.client()
	ctx := context.Background()
	a := NewRedisAllocator(c, "x:", newMemBounds(), RedisAllocOptions{GroupBlock: 3})
	for want := int64(1); want <= 10; want++ {
		if want%4 == 0 {
			if err := c.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if got, err := a.Alloc(ctx, "g", 1, false); err != nil || got != want {
			t.Fatalf("Alloc = %d, %v; want %d", got, err, want)
		}
	}
}

// BenchmarkRedisAllocBlock is one EVALSHA per message and one Persist (here
// in memory) per block of 100.
func BenchmarkRedisAllocBlock(b *testing.B) {
	r := startRedis(b)
	a := NewRedisAllocator(r.client(), "b:", newMemBounds(), RedisAllocOptions{})
	ctx := context.Background()
	for b.Loop() {
		if _, err := a.Alloc(ctx, "g", 1, false); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRedisIncr is the plain INCR per message that the block allocator
// replaces: the same round trip, but nothing survives a flush.
func BenchmarkRedisIncr(b *testing.B) {
	r := startRedis(b)
	c := r.client()
	ctx := context.Background()
	for b.Loop() {
		if err := c.Incr(ctx, "b:incr:{g}").Err(); err != nil {
			b.Fatal(err)
		}
	}
}

var _ redis.UniversalClient = (*redis.Client)(nil)

// TestRedisAllocMany: several conversations' seqs in one call, some from
// their blocks (one pipelined round trip), some needing a new block, one
// bigger than a block, interleaved with another process's Allocs: every
// seq once per conversation, in real-time order, each bound persisted
// before its seqs are handed out.
func TestRedisAllocMany(t *testing.T) {
	r := startRedis(t)
	b := newMemBounds()
	a := NewRedisAllocator(r.client(), "m:", b, RedisAllocOptions{GroupBlock: 10, DirectBlock: 4})
	other := NewRedisAllocator(r.client(), "m:", b, RedisAllocOptions{GroupBlock: 10, DirectBlock: 4})
	ctx := context.Background()
	var grants []grant
	convs := []string{"g1", "g2", "g3", "d1"}
	for round := range 30 {
		reqs := []AllocReq{}
		for i, c := range convs {
			reqs = append(reqs, AllocReq{Conv: c, N: int64(1 + (round+i)%3), Direct: c[0] == 'd'})
		}
		if round == 7 {
			reqs = append(reqs, AllocReq{Conv: "g4", N: 25}) // more than a block
		}
		start := time.Now()
		firsts, errs := a.AllocMany(ctx, reqs)
		end := time.Now()
		for i, req := range reqs {
			if errs[i] != nil {
				t.Fatalf("round %d: %s: %v", round, req.Conv, errs[i])
			}
			g := grant{conv: req.Conv, first: firsts[i], n: req.N, start: start, end: end, call: round}
			if g.last() > b.get(req.Conv) {
				t.Errorf("%s: seqs up to %d handed out above the persisted bound %d", req.Conv, g.last(), b.get(req.Conv))
			}
			grants = append(grants, g)
		}
		g, err := allocChecked(t, other, b, convs[round%len(convs)], 2)
		if err != nil {
			t.Fatal(err)
		}
		g.worker = 1
		grants = append(grants, g)
	}
	checkGrants(t, grants)
	if _, errs := a.AllocMany(ctx, []AllocReq{{Conv: "g1", N: 0}}); errs[0] == nil {
		t.Error("AllocMany of 0 seqs succeeded")
	}
}
