package server

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// socketCap bounds a user's open sockets (websocket.max_sessions_per_user),
// counted from admission, before the upgrade, to the session's end. Alone,
// the process counts its own. With Redis (ShareOnline) the count is every
// process's: one hash per user holds each process's count with when it
// last said so; a process refreshes its fields with presence's refresh,
// and a field not refreshed for presenceTTL (a process that died) no
// longer counts. If Redis fails, the process falls back on its own count
// rather than refusing everyone.
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

// admitSocket adds this process's count to the fresh ones of the others,
// refuses at max, and otherwise records the new count, in one step.
// Each field is "count:unix ms". One key per call, so that it also runs on
// a Redis Cluster.
var admitSocket = redis.NewScript(`
local node, mine, now, ttl, max = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local total = mine
local fields = redis.call('HGETALL', KEYS[1])
for i = 1, #fields, 2 do
	if fields[i] ~= node then
		local n, at = string.match(fields[i + 1], '^(%d+):(%d+)$')
		if n and tonumber(at) >= now - ttl then
			total = total + tonumber(n)
		else
			redis.call('HDEL', KEYS[1], fields[i])
		end
	end
end
if total >= max then
	return 0
end
redis.call('HSET', KEYS[1], node, (mine + 1) .. ':' .. now)
redis.call('PEXPIRE', KEYS[1], ttl)
return 1
`)

// admit counts one more socket of user unless it holds max already.
func (c *socketCap) admit(ctx context.Context, user string, max int) bool {
	c.mu.Lock()
	mine := c.open[user]
	if mine >= max {
		c.mu.Unlock()
		return false
	}
	c.open[user] = mine + 1 // the place is held while Redis decides
	c.mu.Unlock()
	if c.rdb == nil {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	ok, err := admitSocket.Run(ctx, c.rdb, []string{c.key(user)}, c.node, mine, time.Now().UnixMilli(), presenceTTL.Milliseconds(), max).Int()
	if err != nil {
		c.log.Warn("socket cap: counting in Redis failed; this process's own count decides", "user", user, "err", err)
		return true
	}
	if ok == 0 {
		c.mu.Lock()
		c.dropLocked(user)
		c.mu.Unlock()
		return false
	}
	return true
}

// release gives user's place back.
func (c *socketCap) release(user string) {
	c.mu.Lock()
	left := c.dropLocked(user)
	c.mu.Unlock()
	if c.rdb == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var err error
	if left == 0 {
		err = c.rdb.HDel(ctx, c.key(user), c.node).Err()
	} else {
		err = c.rdb.HSet(ctx, c.key(user), c.node, c.field(left)).Err()
	}
	if err != nil {
		c.log.Warn("socket cap: Redis", "user", user, "err", err)
	}
}

func (c *socketCap) dropLocked(user string) int {
	n := c.open[user] - 1
	if n <= 0 {
		delete(c.open, user)
		return 0
	}
	c.open[user] = n
	return n
}

func (c *socketCap) field(n int) string {
	return strconv.Itoa(n) + ":" + strconv.FormatInt(time.Now().UnixMilli(), 10)
}

// refresh says again how many sockets this process holds of each user, so
// that its fields stay fresh (called every presenceRefresh).
func (c *socketCap) refresh(ctx context.Context) error {
	c.mu.Lock()
	counts := make(map[string]int, len(c.open))
	for u, n := range c.open {
		counts[u] = n
	}
	c.mu.Unlock()
	if len(counts) == 0 {
		return nil
	}
	pipe := c.rdb.Pipeline()
	for u, n := range counts {
		pipe.HSet(ctx, c.key(u), c.node, c.field(n))
		pipe.PExpire(ctx, c.key(u), presenceTTL)
	}
	_, err := pipe.Exec(ctx)
	return err
}
