package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// mixedScenario is a working day: small groups plus one group of everyone,
// senders at a steady rate (1 message in 20 to the big group), and members
// dropping off and coming back every so often, pulling what they missed
// with `sync` frames.
var mixedScenario = &scenario{
	name:     "mixed",
	defaults: Sizes{Users: 200, Groups: 20, Members: 10, Sessions: 200, Senders: 20, Rate: 2000, Duration: 10 * time.Second},
	adjust: func(sz *Sizes, given Sizes) {
		if given.Sessions == 0 {
			sz.Sessions = sz.Users
		}
		clampSizes(sz)
		if sz.Messages == 0 && sz.Duration == 0 {
			sz.Duration = 10 * time.Second
		}
		if given.Messages == 0 && given.Duration == 0 && sz.Rate > 0 {
			sz.Messages = int(sz.Rate * sz.Duration.Seconds())
		}
	},
	run: runMixed,
}

const (
	mixedBigEvery   = 20                     // every 20th message goes to the big group
	mixedChurn      = 250 * time.Millisecond // a session drops this often
	mixedOfflineFor = time.Second
)

func runMixed(ctx context.Context, r *run, res *Result) error {
	start := time.Now()
	err := r.setupWorld(ctx, func(u int) [][]int {
		gs := stridedGroups(u, r.sizes.Groups, r.sizes.Members)
		all := make([]int, u)
		for i := range all {
			all[i] = i
		}
		return append(gs, all) // the big group is last in every session's list
	})
	if err != nil {
		return err
	}
	if err := r.connectAll(ctx, r.sessions); err != nil {
		return err
	}
	res.SetupSec = time.Since(start).Seconds()
	go r.acker(ctx)
	r.beginMeasure(ctx)

	senders := r.pickSenders(r.sizes.Senders)
	isSender := map[*session]bool{}
	for _, s := range senders {
		isSender[s] = true
	}
	var others []*session
	for _, s := range r.sessions {
		if !isSender[s] {
			others = append(others, s)
		}
	}
	churnCtx, stopChurn := context.WithCancel(ctx)
	var churn sync.WaitGroup
	var cycles int
	churn.Add(1)
	go func() {
		defer churn.Done()
		cycles = r.churn(churnCtx, ctx, others, &churn)
	}()

	r.setPhase("sending, members dropping off")
	r.runSenders(ctx, sendPlan{
		senders:  senders,
		total:    r.sizes.Messages,
		rate:     r.sizes.Rate,
		duration: r.sizes.Duration,
		pick: func(s *session, k int) *recvState {
			n := len(s.convList)
			if n == 1 || k%mixedBigEvery == mixedBigEvery-1 {
				return s.convList[n-1]
			}
			return s.convList[(k-k/mixedBigEvery)%(n-1)]
		},
	})
	stopChurn()
	churn.Wait()
	if cycles > 0 {
		r.note("churn", fmt.Sprintf("%d sessions dropped off and came back, pulling with sync", cycles))
	}
	r.drain(ctx)
	r.checkFolds(ctx)
	return ctx.Err()
}

// churn drops a random online session every mixedChurn and brings it back
// after mixedOfflineFor, until ctx ends; every dropped session is back
// online once wg is done. Sessions live on runCtx.
func (r *run) churn(ctx, runCtx context.Context, pool []*session, wg *sync.WaitGroup) int {
	if len(pool) == 0 {
		return 0
	}
	t := time.NewTicker(mixedChurn)
	defer t.Stop()
	var mu sync.Mutex
	out := map[*session]bool{}
	cycles := 0
	for {
		select {
		case <-ctx.Done():
			return cycles
		case <-t.C:
		}
		s := pool[rand.IntN(len(pool))]
		mu.Lock()
		busy := out[s] || !s.online()
		if !busy {
			out[s] = true
		}
		mu.Unlock()
		if busy {
			continue
		}
		cycles++
		s.disconnect()
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(mixedOfflineFor)
			// runCtx, not ctx: the session must come back even when
			// churning has stopped.
			if err := s.connect(runCtx, true); err != nil {
				r.note("churn", "reconnect failed: "+err.Error())
			} else {
				r.stats.reconnects.Add(1)
			}
			mu.Lock()
			delete(out, s)
			mu.Unlock()
		}()
	}
}
