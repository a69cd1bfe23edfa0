package bench

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"sync/atomic"
)

// benchUser is an account the bench registered.
type benchUser struct {
	idx   int
	name  string
	id    string
	token string
}

// group is a conversation the bench created, with its members.
type group struct {
	id      string
	members []*benchUser
}

// benchPassword is long enough for any sensible password rule.
const benchPassword = "bench-password-0123456789"

// runPrefix makes usernames unique per run, so a bench can drive a server
// that already holds data (--url) or an earlier run's users.
func runPrefix() string {
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 6)
	rand.Read(b)
	for i := range b {
		b[i] = letters[int(b[i])%len(letters)]
	}
	return "b" + string(b)
}

// parallel runs f(0..n-1) on at most workers goroutines and returns the first error.
func parallel(ctx context.Context, n, workers int, f func(i int) error) error {
	var next atomic.Int64
	var once sync.Once
	var first error
	var wg sync.WaitGroup
	for w := 0; w < min(workers, n); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := f(i); err != nil {
					once.Do(func() { first = err })
					next.Store(int64(n))
					return
				}
			}
		}()
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return first
}

// setupUsers registers n users. Registration hashes a password, so it is
// the slow part of setup on a small machine; it is not measured.
func (r *run) setupUsers(ctx context.Context, n int) error {
	prefix := runPrefix()
	r.users = make([]*benchUser, n)
	var done atomic.Int64
	return parallel(ctx, n, 8, func(i int) error {
		name := fmt.Sprintf("%s_u%d", prefix, i)
		u, tok, err := r.api.register(ctx, name, benchPassword)
		if err != nil {
			return fmt.Errorf("registering users: %w", err)
		}
		r.users[i] = &benchUser{idx: i, name: name, id: u.ID, token: tok}
		r.setPhase(fmt.Sprintf("setup: registered %d/%d users", done.Add(1), n))
		return nil
	})
}

// setupGroups creates one group per member list (indexes into r.users); the
// first member creates it and so is its owner.
func (r *run) setupGroups(ctx context.Context, memberLists [][]int) error {
	r.groups = make([]*group, len(memberLists))
	var done atomic.Int64
	return parallel(ctx, len(memberLists), 4, func(i int) error {
		idx := memberLists[i]
		g := &group{}
		ids := make([]string, 0, len(idx))
		for k, ui := range idx {
			u := r.users[ui]
			g.members = append(g.members, u)
			if k > 0 {
				ids = append(ids, u.id)
			}
		}
		id, err := r.api.createGroup(ctx, g.members[0].token, fmt.Sprintf("bench %s %d", r.name, i), ids)
		if err != nil {
			return fmt.Errorf("creating groups: %w", err)
		}
		g.id = id
		r.groups[i] = g
		r.setPhase(fmt.Sprintf("setup: created %d/%d groups", done.Add(1), len(memberLists)))
		return nil
	})
}

// stridedGroups lays out g groups of m members over u users: group i holds
// users i*m .. i*m+m-1 (mod u), so every user is in about g*m/u groups.
func stridedGroups(u, g, m int) [][]int {
	m = min(m, u)
	out := make([][]int, g)
	for i := range out {
		for j := 0; j < m; j++ {
			out[i] = append(out[i], (i*m+j)%u)
		}
	}
	return out
}

// setupSessions makes n sessions, session i for user i mod len(users), each
// following every group its user is in.
func (r *run) setupSessions(n int) {
	byUser := map[string][]string{}
	for _, g := range r.groups {
		for _, u := range g.members {
			byUser[u.id] = append(byUser[u.id], g.id)
		}
	}
	r.sessions = make([]*session, n)
	for i := range r.sessions {
		u := r.users[i%len(r.users)]
		s := newSession(i, u, r)
		for _, c := range byUser[u.id] {
			s.addConv(c)
		}
		r.sessions[i] = s
	}
}

// connectAll opens the given sessions' WebSockets.
func (r *run) connectAll(ctx context.Context, ss []*session) error {
	var done atomic.Int64
	return parallel(ctx, len(ss), 16, func(i int) error {
		if err := ss[i].connect(ctx, false); err != nil {
			return err
		}
		r.setPhase(fmt.Sprintf("setup: connected %d/%d sessions", done.Add(1), len(ss)))
		return nil
	})
}

// closeAll closes every session's socket.
func (r *run) closeAll() {
	r.stopping.Store(true)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for _, s := range r.sessions {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			s.disconnect()
		}()
	}
	wg.Wait()
}

// pickSenders picks n sessions of distinct users (while there are enough
// users) at even strides, so that the senders cover the groups.
func (r *run) pickSenders(n int) []*session {
	return spread(r.sessions[:min(len(r.users), len(r.sessions))], n)
}

func spread(ss []*session, n int) []*session {
	n = min(n, len(ss))
	out := make([]*session, 0, n)
	for i := 0; i < n; i++ {
		out = append(out, ss[i*len(ss)/n])
	}
	return out
}
