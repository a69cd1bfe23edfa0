package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// Typists run beside the send scenario (--typists N): N more users, each
// online with one session, all in one group of their own, each sending a
// `typing` frame every --typing-every (3 s, the rate a client sends at;
// 100ms is a hostile client the server must throttle). They send no
// messages, so the send scenario's accounting is untouched and its latency
// shows what relaying their typing costs everyone else.

// startTypists sets the typists up and starts them; the returned function
// stops them and records what they sent and received as notes.
func (r *run) startTypists(ctx context.Context) (func(), error) {
	n := r.opts.Typists
	if n <= 0 {
		return func() {}, nil
	}
	prefix := runPrefix()
	users := make([]*benchUser, n)
	err := parallel(ctx, n, 8, func(i int) error {
		name := fmt.Sprintf("%s_t%d", prefix, i)
		u, tok, err := r.api.register(ctx, name, benchPassword)
		if err != nil {
			return fmt.Errorf("registering typists: %w", err)
		}
		users[i] = &benchUser{idx: i, name: name, id: u.ID, token: tok}
		return nil
	})
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, n-1)
	for _, u := range users[1:] {
		ids = append(ids, u.id)
	}
	conv, err := r.api.createGroup(ctx, users[0].token, "bench typists", ids)
	if err != nil {
		return nil, fmt.Errorf("creating the typists' group: %w", err)
	}
	ss := make([]*session, n)
	for i, u := range users {
		// Ids past the senders' sessions: cmid prefixes stay unique.
		ss[i] = newSession(1_000_000+i, u, r)
		ss[i].addConv(conv)
	}
	if err := r.connectAll(ctx, ss); err != nil {
		return nil, err
	}
	every := r.opts.TypingEvery
	if every <= 0 {
		every = 3 * time.Second
	}
	frame := []byte(`{"type":"typing","conv":` + string(quoteJSON(conv)) + `}`)
	tctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var mu sync.Mutex
	sent := 0
	for _, s := range ss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Staggered: typists do not type in step.
			t := time.NewTimer(rand.N(every))
			defer t.Stop()
			k := 0
			for {
				select {
				case <-tctx.Done():
					mu.Lock()
					sent += k
					mu.Unlock()
					return
				case <-t.C:
				}
				if s.write(frame) == nil {
					k++
				}
				t.Reset(every)
			}
		}()
	}
	return func() {
		cancel()
		wg.Wait()
		for _, s := range ss {
			s.disconnect()
		}
		r.mu.Lock()
		r.notes[fmt.Sprintf("typing frames sent by %d typists, one each per %s", n, every)] = sent
		r.notes["typing frames received (relayed by the server)"] = int(r.stats.typing.Load())
		r.mu.Unlock()
	}, nil
}
