package server

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// With Redis, the processes watch each other's liveness, so that one that
// died (kill -9, a lost host) or stopped does not leave its users online
// for everyone else: its sessions are gone, but only it would have told
// their contacts. Each process keeps a key of its own alive (with a TTL
// Redis counts, so no two clocks are compared) and lists, in a set of its
// own, the users it holds online. Every nodeBeat each process renews its
// key and looks for processes whose key expired; the one that takes such
// a process off the list of processes (SREM answers 1 to one of them)
// buries it: drops it from its users' presence entries and tells the
// contacts of each user no other process holds that the user went
// offline.
//
// A user's contacts thus hear it left nodeTTL to nodeTTL+nodeBeat after
// its process died or stopped (PROTOCOL.md: offline within 5 s of the
// last session closing). A stop leaves its key to expire too: that wait
// is the presence grace, in which the user's sockets reconnect to another
// process (a rolling restart), which then holds the user, so that nobody
// is told anything. A process that stalls longer than nodeTTL is taken for
// dead and announces its users again when it comes back (beat).
const (
	nodeBeat = time.Second
	nodeTTL  = 4 * nodeBeat
)

func (p *presence) nodesKey() string            { return p.prefix + "presence:nodes" }
func (p *presence) aliveKey(node string) string { return p.prefix + "presence:alive:" + node }
func (p *presence) usersKey(node string) string { return p.prefix + "presence:users:" + node }

// beat renews this process's liveness and then buries the processes
// whose liveness expired. A process that was itself buried meanwhile (it
// stalled past nodeTTL) has its users announced again.
func (p *presence) beat(ctx context.Context) error {
	pipe := p.rdb.TxPipeline()
	pipe.Set(ctx, p.aliveKey(p.node), 1, nodeTTL)
	added := pipe.SAdd(ctx, p.nodesKey(), p.node)
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	if added.Val() == 1 && p.beaten {
		p.log.Warn("presence: this process was taken for dead by another one (it did not renew its liveness in time); announcing its users again")
		p.mu.Lock()
		users := make([]string, 0, len(p.told))
		for u := range p.told {
			users = append(users, u)
		}
		// Told again through settle, one announcement per user at a time
		// as always: the contacts may have heard these users left.
		clear(p.told)
		p.mu.Unlock()
		for _, u := range users {
			go p.settle(u)
		}
	}
	p.beaten = true
	return p.sweep(ctx)
}

// sweep buries the listed processes whose liveness key expired.
func (p *presence) sweep(ctx context.Context) error {
	nodes, err := p.rdb.SMembers(ctx, p.nodesKey()).Result()
	if err != nil {
		return err
	}
	pipe := p.rdb.Pipeline()
	alive := make(map[string]*redis.IntCmd, len(nodes))
	for _, n := range nodes {
		if n != p.node {
			alive[n] = pipe.Exists(ctx, p.aliveKey(n))
		}
	}
	if len(alive) == 0 {
		return nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	for n, c := range alive {
		if c.Val() != 0 {
			continue
		}
		if taken, err := p.rdb.SRem(ctx, p.nodesKey(), n).Result(); err != nil {
			return err
		} else if taken == 1 {
			// Beside the beats, with time of its own: a process's users
			// may be many, each announcement a look-up of contacts, and
			// the beats must go on renewing this process's key.
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.bury(n)
			}()
		}
	}
	return nil
}

// bury takes a dead process out of its users' presence entries and tells
// the contacts of those no process holds now that they went offline;
// nothing when the process has come back meanwhile (it stalled, and
// announces its users itself).
func (p *presence) bury(node string) {
	ctx, cancel := context.WithTimeout(context.Background(), buryTimeout)
	defer cancel()
	go func() { // a stop does not wait for the announcements
		select {
		case <-p.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	users, err := p.rdb.SMembers(ctx, p.usersKey(node)).Result()
	if err != nil {
		p.log.Warn("presence: burying a process", "node", node, "err", err)
		return
	}
	min := strconv.FormatInt(time.Now().Add(-presenceTTL).UnixMilli(), 10)
	pipe := p.rdb.TxPipeline()
	left := make([]*redis.IntCmd, len(users))
	for i, u := range users {
		pipe.ZRem(ctx, p.key(u), node)
		left[i] = pipe.ZCount(ctx, p.key(u), min, "+inf")
	}
	pipe.Del(ctx, p.usersKey(node))
	back := pipe.Exists(ctx, p.aliveKey(node))
	if _, err := pipe.Exec(ctx); err != nil {
		p.log.Warn("presence: burying a process", "node", node, "err", err)
		return
	}
	if back.Val() != 0 {
		return
	}
	gone := 0
	for i, u := range users {
		if left[i].Val() > 0 || p.holds(u) {
			continue
		}
		gone++
		if err := p.srv.chat.Presence(ctx, u, false); err != nil {
			p.log.Warn("presence", "user", u, "err", err)
		}
	}
	p.log.Info("presence: a process sharing Redis stopped renewing its liveness; its users are offline unless another process holds them", "node", node, "users", len(users), "offline", gone)
}

// buryTimeout bounds the announcements of one buried process.
const buryTimeout = time.Minute

// holds reports whether user has a session here (or is in its grace).
func (p *presence) holds(user string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.count[user] > 0 || p.leaving[user] != nil
}

// local lists the users this process holds online.
func (p *presence) local() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	users := make([]string, 0, len(p.count)+len(p.leaving))
	for u := range p.count {
		users = append(users, u)
	}
	for u := range p.leaving {
		if p.count[u] == 0 {
			users = append(users, u)
		}
	}
	return users
}
