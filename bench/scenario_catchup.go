package bench

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"
)

// catchupWarmup messages reach the members live before they go offline, so
// the pull starts from a seq the client holds, as a phone's would.
const catchupWarmup = 10

// catchupScenario: one group; the senders stay online, every other member
// goes offline while --messages arrive, then connects and pulls them with
// GET .../messages?after_seq=<last held>&limit=1000 until completed.
var catchupScenario = &scenario{
	name:     "catchup",
	defaults: Sizes{Users: 2, Groups: 1, Members: 2, Sessions: 2, Senders: 1, Messages: 10000},
	adjust: func(sz *Sizes, given Sizes) {
		if given.Members == 0 {
			sz.Members = sz.Users
		}
		sz.Groups = 1
		sz.Sessions = sz.Users // one device per user: the offline one is the phone
		clampSizes(sz)
		if sz.Senders >= sz.Members {
			sz.Senders = max(1, sz.Members-1)
		}
	},
	run: runCatchup,
}

func runCatchup(ctx context.Context, r *run, res *Result) error {
	start := time.Now()
	if err := r.setupWorld(ctx, func(u int) [][]int { return stridedGroups(u, 1, r.sizes.Members) }); err != nil {
		return err
	}
	members := r.sessions[:r.sizes.Members]
	senders, catchers := members[:r.sizes.Senders], members[r.sizes.Senders:]
	if len(catchers) == 0 {
		return fmt.Errorf("catchup needs at least 2 members")
	}
	if err := r.connectAll(ctx, members); err != nil {
		return err
	}
	go r.acker(ctx)
	r.setPhase("warm-up")
	r.runSenders(ctx, sendPlan{senders: senders, total: catchupWarmup})
	r.drain(ctx)
	for _, s := range catchers {
		s.disconnect()
	}
	res.SetupSec = time.Since(start).Seconds()

	r.beginMeasure(ctx)
	r.firstSend.Store(0) // rates count the measured sends, not the warm-up
	r.setPhase(fmt.Sprintf("sending while %d offline", len(catchers)))
	r.runSenders(ctx, sendPlan{senders: senders, total: r.sizes.Messages, rate: r.sizes.Rate, duration: r.sizes.Duration})
	if ctx.Err() != nil {
		return ctx.Err()
	}

	r.setPhase("catching up")
	type pull struct {
		connect, pull time.Duration
		msgs, pages   int64
		after         int64
		err           error
	}
	pulls := make([]pull, len(catchers))
	var wg sync.WaitGroup
	for i, s := range catchers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := &pulls[i]
			t0 := time.Now()
			if p.err = s.connect(ctx, false); p.err != nil {
				return
			}
			p.connect = time.Since(t0)
			p.after, p.msgs, p.pages, p.pull, p.err = r.pullHTTP(ctx, s, s.convList[0])
		}()
	}
	wg.Wait()
	c := &Catchup{Members: len(catchers)}
	var times []float64
	for _, p := range pulls {
		if p.err != nil {
			return p.err
		}
		c.Messages = max(c.Messages, p.msgs)
		c.Pages = max(c.Pages, p.pages)
		c.Seconds = max(c.Seconds, p.pull.Seconds())
		c.ConnectSec = max(c.ConnectSec, p.connect.Seconds())
		c.AfterSeqLow = p.after
		times = append(times, p.pull.Seconds())
	}
	sort.Float64s(times)
	c.SecondsP50 = times[len(times)/2]
	if c.Seconds > 0 {
		c.MsgsPerSec = float64(c.Messages) / c.Seconds
	}
	res.Catchup = c
	r.drain(ctx)
	return ctx.Err()
}

// pullHTTP is a client back from offline: it pages from the last seq it holds
// until the server says completed, then acks what it has.
func (r *run) pullHTTP(ctx context.Context, s *session, st *recvState) (after, msgs, pages int64, took time.Duration, err error) {
	s.mu.Lock()
	after = st.contig
	s.mu.Unlock()
	from := after
	t0 := time.Now()
	for {
		p, err := r.api.messagesAfter(ctx, s.user.token, st.conv, from, syncLimit)
		if err != nil {
			return after, msgs, pages, time.Since(t0), err
		}
		pages++
		now := r.now()
		s.mu.Lock()
		last := from
		for i := range p.Messages {
			m := p.Messages[i].view()
			if len(m.Conv) == 0 {
				m.Conv = st.convBytes
			}
			if m.Seq <= last {
				r.stats.orderViolations.Add(1)
			}
			last = m.Seq
			s.deliverLocked(&m, false, now)
		}
		s.mu.Unlock()
		msgs += int64(len(p.Messages))
		r.stats.syncPages.Add(1)
		if *p.Completed {
			s.mu.Lock()
			if p.MaxSeq > st.contig {
				st.contig = p.MaxSeq
				st.advance()
			}
			s.mu.Unlock()
			break
		}
		if len(p.Messages) == 0 {
			r.deviation(fmt.Sprintf("GET /api/v1/conversations/{id}/messages?after_seq=%d: no messages but completed:false", from))
			break
		}
		from = last
	}
	took = time.Since(t0)
	s.mu.Lock()
	high := st.contig
	s.mu.Unlock()
	if err := r.api.ack(ctx, s.user.token, st.conv, high); err != nil {
		r.deviation(err.Error())
	}
	return after, msgs, pages, took, nil
}
