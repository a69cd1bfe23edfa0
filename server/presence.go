package server

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/imserver/imserver/chat"
	"github.com/redis/go-redis/v9"
)

// presence decides when a user comes online (its first session opens) and
// goes offline (its last one closed a grace period ago, so that a reload
// does not flicker), and has the chat service tell its contacts. With
// Redis, "first" and "last" count the sessions of every process: each
// process keeps, per online user, its node id in a sorted set scored by
// when it last said so, and refreshes them; a process that died leaves
// entries that go stale.
type presence struct {
	srv   *Server
	grace time.Duration
	log   *slog.Logger

	mu      sync.Mutex
	count   map[string]int         // open sessions of this process per user
	leaving map[string]*time.Timer // users whose last session closed, in grace
	told    map[string]bool        // users whose contacts were last told "online"
	running map[string]bool        // users whose announcement is under way
	done    bool                   // shut down: nobody is told anything more

	rdb    redis.UniversalClient // nil when alone
	prefix string
	node   string
	beaten bool // refreshLoop has renewed this process's liveness (presence_nodes.go)
	stop   chan struct{}
	wg     sync.WaitGroup
}

// Presence timings with Redis: entries are refreshed every presenceRefresh
// and count as online for presenceTTL.
const (
	presenceRefresh = 10 * time.Second
	presenceTTL     = 3 * presenceRefresh
)

func newPresence(srv *Server, grace time.Duration, log *slog.Logger) *presence {
	return &presence{srv: srv, grace: grace, log: log, count: make(map[string]int),
		leaving: make(map[string]*time.Timer), told: make(map[string]bool), running: make(map[string]bool)}
}

// ShareOnline makes presence, and the cap on a user's sockets, count the
// sessions of every process sharing rdb. Call it before serving;
// StopSharing ends the refreshes.
func (s *Server) ShareOnline(rdb redis.UniversalClient, prefix string) {
	p := s.presence
	p.rdb, p.prefix, p.node, p.stop = rdb, prefix, chat.NewID(), make(chan struct{})
	s.sockets.rdb, s.sockets.prefix, s.sockets.node = rdb, prefix, p.node
	p.wg.Add(1)
	go p.refreshLoop()
}

func (p *presence) key(user string) string { return p.prefix + "presence:" + user }

// opened counts a new session of user.
func (p *presence) opened(user string) {
	p.mu.Lock()
	if p.done {
		p.mu.Unlock()
		return
	}
	p.count[user]++
	first := p.count[user] == 1
	if t, ok := p.leaving[user]; ok && first {
		// Back within the grace: nobody heard it left.
		t.Stop()
		delete(p.leaving, user)
		first = false
	}
	p.mu.Unlock()
	if first {
		go p.settle(user)
	}
}

// closed counts a session of user gone.
func (p *presence) closed(user string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return
	}
	p.count[user]--
	if p.count[user] > 0 {
		return
	}
	delete(p.count, user)
	p.leaving[user] = time.AfterFunc(p.grace, func() {
		p.mu.Lock()
		if p.count[user] > 0 || p.leaving[user] == nil {
			p.mu.Unlock()
			return
		}
		delete(p.leaving, user)
		p.mu.Unlock()
		p.settle(user)
	})
}

// settle tells user's contacts its state now, if that is not what they
// were last told. One announcement per user runs at a time and the runner
// looks again when it is done: a quick leave and return would otherwise
// race its "offline" past its "online" and leave contacts with the wrong
// one.
func (p *presence) settle(user string) {
	p.mu.Lock()
	if p.running[user] {
		p.mu.Unlock()
		return // the runner will see the new state
	}
	p.running[user] = true
	for {
		want := p.count[user] > 0 || p.leaving[user] != nil
		if p.done || want == p.told[user] {
			delete(p.running, user)
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		if want {
			p.came(user)
		} else {
			p.went(user)
		}
		p.mu.Lock()
		if want {
			p.told[user] = true
		} else {
			delete(p.told, user)
		}
	}
}

func (p *presence) came(user string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if p.rdb != nil {
		now := time.Now().UnixMilli()
		k := p.key(user)
		pipe := p.rdb.TxPipeline()
		pipe.ZRemRangeByScore(ctx, k, "-inf", strconv.FormatInt(now-presenceTTL.Milliseconds(), 10))
		pipe.ZAdd(ctx, k, redis.Z{Score: float64(now), Member: p.node})
		pipe.Expire(ctx, k, presenceTTL)
		pipe.SAdd(ctx, p.usersKey(p.node), user)
		pipe.Expire(ctx, p.usersKey(p.node), presenceTTL)
		n := pipe.ZCard(ctx, k)
		if _, err := pipe.Exec(ctx); err == nil && n.Val() > 1 {
			return // online in another process already
		}
	}
	if err := p.srv.chat.Presence(ctx, user, true); err != nil {
		p.log.Warn("presence", "user", user, "err", err)
	}
}

func (p *presence) went(user string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if p.rdb != nil {
		now := time.Now().UnixMilli()
		k := p.key(user)
		pipe := p.rdb.TxPipeline()
		pipe.ZRem(ctx, k, p.node)
		pipe.SRem(ctx, p.usersKey(p.node), user)
		pipe.ZRemRangeByScore(ctx, k, "-inf", strconv.FormatInt(now-presenceTTL.Milliseconds(), 10))
		n := pipe.ZCard(ctx, k)
		if _, err := pipe.Exec(ctx); err == nil && n.Val() > 0 {
			return // still online in another process
		}
	}
	if err := p.srv.chat.Presence(ctx, user, false); err != nil {
		p.log.Warn("presence", "user", user, "err", err)
	}
}

// online returns those of users who are online now (here, in grace, or in
// another process).
func (p *presence) online(ctx context.Context, users []string) []string {
	out := []string{}
	var rest []string
	p.mu.Lock()
	for _, u := range users {
		if p.count[u] > 0 || p.leaving[u] != nil {
			out = append(out, u)
		} else if p.rdb != nil {
			rest = append(rest, u)
		}
	}
	p.mu.Unlock()
	if len(rest) == 0 {
		return out
	}
	min := strconv.FormatInt(time.Now().Add(-presenceTTL).UnixMilli(), 10)
	pipe := p.rdb.Pipeline()
	counts := make([]*redis.IntCmd, len(rest))
	for i, u := range rest {
		counts[i] = pipe.ZCount(ctx, p.key(u), min, "+inf")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return out
	}
	for i, c := range counts {
		if c.Val() > 0 {
			out = append(out, rest[i])
		}
	}
	return out
}

// refreshLoop renews this process's liveness every nodeBeat (burying
// dead processes, presence_nodes.go) and its users' entries every
// presenceRefresh.
func (p *presence) refreshLoop() {
	defer p.wg.Done()
	t := time.NewTicker(nodeBeat)
	defer t.Stop()
	last := time.Now()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := p.beat(ctx); err != nil {
			p.log.Warn("presence: liveness", "err", err)
		}
		if time.Since(last) >= presenceRefresh {
			last = time.Now()
			p.refresh(ctx)
		}
		cancel()
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
	}
}

// refresh renews the entries of the users this process holds online.
func (p *presence) refresh(ctx context.Context) {
	users := p.local()
	now := float64(time.Now().UnixMilli())
	pipe := p.rdb.Pipeline()
	members := make([]any, len(users))
	for i, u := range users {
		pipe.ZAdd(ctx, p.key(u), redis.Z{Score: now, Member: p.node})
		pipe.Expire(ctx, p.key(u), presenceTTL)
		members[i] = u
	}
	if len(members) > 0 {
		pipe.SAdd(ctx, p.usersKey(p.node), members...)
		pipe.Expire(ctx, p.usersKey(p.node), presenceTTL)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		p.log.Warn("presence: refresh", "err", err)
	}
	if err := p.srv.sockets.refresh(ctx); err != nil {
		p.log.Warn("socket cap: refresh", "err", err)
	}
}

// close stops the refreshes and the pending offline announcements (the
// server is going away): with Redis, another process buries it and tells
// its users' contacts (presence_nodes.go).
func (p *presence) close() {
	p.mu.Lock()
	p.done = true
	for _, t := range p.leaving {
		t.Stop()
	}
	p.mu.Unlock()
	if p.stop != nil {
		close(p.stop)
		p.wg.Wait()
	}
}
