package server

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// With Redis, the processes watch each other's liveness, so that one that
// died (kill -9, a lost host, a stop) does not leave its users online for
// everyone else: its sessions are gone, but only it would have told their
// contacts. Each process keeps a key of its own alive (with a TTL Redis
// counts, so no two clocks are compared) and lists, in a set of its own,
// the users it holds online. Every nodeBeat each process renews its key
// and looks for processes whose key expired; the one that takes such a
// process off the list of processes (SREM answers 1 to one of them) buries
// it: drops it from its users' presence entries and tells the contacts of
// each user no other process holds that the user went offline.
//
// A user's contacts thus hear it left at most nodeTTL+nodeBeat after its
// process died (PROTOCOL.md: offline within 5 s of its last session
// closing); a process that stalls longer than nodeTTL is taken for dead
// and announces its users again when it comes back (beat).
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
		for _, u := range p.local() {
			p.came(u)
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
			if err := p.bury(ctx, n); err != nil {
				return err
			}
		}
	}
	return nil
}

// bury takes a dead process out of its users' presence entries and tells
// the contacts of those no process holds now that they went offline.
func (p *presence) bury(ctx context.Context, node string) error {
	users, err := p.rdb.SMembers(ctx, p.usersKey(node)).Result()
	if err != nil {
		return err
	}
	min := strconv.FormatInt(time.Now().Add(-presenceTTL).UnixMilli(), 10)
	pipe := p.rdb.TxPipeline()
	left := make([]*redis.IntCmd, len(users))
	for i, u := range users {
		pipe.ZRem(ctx, p.key(u), node)
		left[i] = pipe.ZCount(ctx, p.key(u), min, "+inf")
	}
	pipe.Del(ctx, p.usersKey(node))
	if _, err := pipe.Exec(ctx); err != nil {
		return err
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
	return nil
}

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

// retire is a stop's last word: its liveness key goes at once, so that
// the next beat of another process buries it instead of waiting for the
// key to expire.
func (p *presence) retire() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := p.rdb.Del(ctx, p.aliveKey(p.node)).Err(); err != nil {
		p.log.Warn("presence: retiring", "err", err)
	}
}
