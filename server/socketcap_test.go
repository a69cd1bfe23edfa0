package server

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/imserver/imserver/internal/redistest"
)

// sharedCaps returns n socket caps sharing one Redis, as n processes'.
func sharedCaps(t *testing.T, n int) []*socketCap {
	rdb := redistest.Client(t)
	caps := make([]*socketCap, n)
	for i := range caps {
		caps[i] = newSocketCap(slog.Default())
		caps[i].rdb, caps[i].prefix, caps[i].node = rdb, "t:", string(rune('a'+i))+"node"
	}
	return caps
}

// Many admissions at once on two processes, then releases racing the
// refreshes: never more than the cap at any time, and nothing left counted
// (nor brought back by a refresh) once every socket is gone.
func TestSocketCapShared(t *testing.T) {
	caps := sharedCaps(t, 2)
	ctx := context.Background()
	const max = 8
	for round := range 20 {
		var admitted atomic.Int32
		var wg sync.WaitGroup
		var mu sync.Mutex
		var held []func()
		for i := range 40 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := caps[i%2]
				if ok, counted := c.admit(ctx, "u", max); ok {
					if !counted {
						t.Error("admitted without Redis counting it")
					}
					admitted.Add(1)
					mu.Lock()
					held = append(held, func() { c.release("u", counted) })
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if n := admitted.Load(); n != max {
			t.Fatalf("round %d: %d sockets admitted on two processes, cap %d", round, n, max)
		}
		for _, release := range held {
			wg.Add(2)
			go func() { defer wg.Done(); release() }()
			go func() {
				defer wg.Done()
				if err := caps[round%2].refresh(ctx); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if left, err := caps[0].rdb.HGetAll(ctx, caps[0].key("u")).Result(); err != nil || len(left) != 0 {
			t.Fatalf("round %d: after every release Redis holds %v (%v)", round, left, err)
		}
	}
}

// A process that stopped vouching for its count (it died) stops counting
// after presenceTTL; one that vouches goes on counting.
func TestSocketCapStaleProcess(t *testing.T) {
	caps := sharedCaps(t, 2)
	ctx := context.Background()
	for range 2 {
		if ok, _ := caps[0].admit(ctx, "u", 2); !ok {
			t.Fatal("admission refused under the cap")
		}
	}
	if ok, _ := caps[1].admit(ctx, "u", 2); ok {
		t.Fatal("a third socket on another process was admitted")
	}
	// Process a's last word is older than presenceTTL.
	old := time.Now().Add(-presenceTTL - time.Second).UnixMilli()
	caps[0].rdb.HSet(ctx, caps[0].key("u"), caps[0].node+":at", old)
	if ok, _ := caps[1].admit(ctx, "u", 2); !ok {
		t.Fatal("a dead process's sockets still count")
	}
	if n, _ := caps[1].rdb.HExists(ctx, caps[1].key("u"), caps[0].node).Result(); n {
		t.Fatal("the dead process's count was not dropped")
	}
	// b vouches and keeps its place.
	if err := caps[1].refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, _ := caps[1].admit(ctx, "u", 2); !ok {
		t.Fatal("second socket on b refused")
	}
	if ok, _ := caps[1].admit(ctx, "u", 2); ok {
		t.Fatal("third socket on b admitted")
	}
}
