package server

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// socketCap bounds a user's open sockets (websocket.max_sessions_per_user),
// counted from admission, before the upgrade, to the session's end. Alone,
// the process counts its own. With Redis (ShareOnline) the count is every
// process's: one hash per user holds, for each process, its count (changed
// by one in each step, so that steps of one process that overlap cannot
// undo each other) and when the process last vouched for it ("<node>:at");
// a process refreshes its timestamps with presence's refresh, and a count
// not vouched for within presenceTTL (a process that died) no longer
// counts. If Redis fails, the process falls back on its own count rather
// than refusing everyone; a socket admitted so is not counted in Redis.
type socketCap struct {
	log *slog.Logger

	mu   sync.Mutex
	open map[string]int // this process's sockets per user

	rdb          redis.UniversalClient // nil when alone
	prefix, node string
}

func newSocketCap(log *slog.Logger) *socketCap {
	return &socketCap{log: log, open: make(map[string]int)}
}

func (c *socketCap) key(user string) string { return c.prefix + "sockets:" + user }

// The scripts touch one key each, so that they also run on a Redis
// Cluster. Node ids hold no colon.
var (
	// admitSocket sums the counts vouched for within the TTL (this
	// process's always), drops the others, and adds one unless the sum
	// is at max.
	admitSocket = redis.NewScript(`
local node, now, ttl, max = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local counts, ats = {}, {}
local fields = redis.call('HGETALL', KEYS[1])
for i = 1, #fields, 2 do
	local n = string.match(fields[i], '^(.*):at$')
	if n then ats[n] = tonumber(fields[i + 1]) else counts[fields[i]] = tonumber(fields[i + 1]) end
end
local total = 0
for n, count in pairs(counts) do
	if n == node or (ats[n] and ats[n] >= now - ttl) then
		total = total + count
	else
		redis.call('HDEL', KEYS[1], n, n .. ':at')
	end
end
if total >= max then
	return 0
end
redis.call('HINCRBY', KEYS[1], node, 1)
redis.call('HSET', KEYS[1], node .. ':at', now)
redis.call('PEXPIRE', KEYS[1], ttl)
return 1
`)
	// releaseSocket takes one off this process's count.
	releaseSocket = redis.NewScript(`
if redis.call('HINCRBY', KEYS[1], ARGV[1], -1) <= 0 then
	redis.call('HDEL', KEYS[1], ARGV[1], ARGV[1] .. ':at')
end
return 0
`)
	// vouchSockets renews this process's timestamp, if it has a count
	// (a refresh never brings back a count its last release removed).
	vouchSockets = redis.NewScript(`
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
	redis.call('HSET', KEYS[1], ARGV[1] .. ':at', ARGV[2])
	redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return 0
`)
)

// admit counts one more socket of user unless it holds max already. The
// caller gives the place back with release(user, counted).
func (c *socketCap) admit(ctx context.Context, user string, max int) (ok, counted bool) {
	c.mu.Lock()
	mine := c.open[user]
	if mine >= max {
		c.mu.Unlock()
		return false, false
	}
	c.open[user] = mine + 1 // the place is held while Redis decides
	c.mu.Unlock()
	if c.rdb == nil {
		return true, false
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	res, err := admitSocket.Run(ctx, c.rdb, []string{c.key(user)}, c.node, time.Now().UnixMilli(), presenceTTL.Milliseconds(), max).Int()
	if err != nil {
		c.log.Warn("socket cap: counting in Redis failed; this process's own count decides", "user", user, "err", err)
		return true, false
	}
	if res == 0 {
		c.release(user, false)
		return false, false
	}
	return true, true
}

// release gives user's place back; counted says whether Redis counted it.
func (c *socketCap) release(user string, counted bool) {
	c.mu.Lock()
	if n := c.open[user] - 1; n > 0 {
		c.open[user] = n
	} else {
		delete(c.open, user)
	}
	c.mu.Unlock()
	if !counted {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := releaseSocket.Run(ctx, c.rdb, []string{c.key(user)}, c.node).Err(); err != nil {
		c.log.Warn("socket cap: Redis", "user", user, "err", err)
	}
}

// refresh vouches again for this process's counts of the users it holds
// sockets of (called every presenceRefresh).
func (c *socketCap) refresh(ctx context.Context) error {
	c.mu.Lock()
	users := make([]string, 0, len(c.open))
	for u := range c.open {
		users = append(users, u)
	}
	c.mu.Unlock()
	if len(users) == 0 {
		return nil
	}
	if err := vouchSockets.Load(ctx, c.rdb).Err(); err != nil {
		return err
	}
	now, ttl := time.Now().UnixMilli(), presenceTTL.Milliseconds()
	pipe := c.rdb.Pipeline()
	for _, u := range users {
		vouchSockets.EvalSha(ctx, pipe, []string{c.key(u)}, c.node, now, ttl)
	}
	_, err := pipe.Exec(ctx)
	return err
}
