package seq

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// windowScript keeps one sorted set per key, one member per event.
//
// Scores are microseconds: a double holds microseconds since 1970 exactly but
// not nanoseconds. Members start with the event's nanosecond time, zero-padded
// to 20 digits so that string order is time order, which settles the one
// microsecond that straddles the cutoff exactly. The random suffix keeps two
// events at the same time distinct.
//
// KEYS[1]  the sorted set
// ARGV[1]  cutoff, in microseconds (floor)
// ARGV[2]  cutoff, in nanoseconds, padded like the members: events at or before it are out
// ARGV[3]  limit: at most this many members are kept
// ARGV[4]  key TTL in ms
// ARGV[5]  score of the new event, or "" to only count
// ARGV[6]  member of the new event
// ARGV[7], ARGV[8] ... more events' scores and members (SharedWindow)
const windowScript = `
local key = KEYS[1]
redis.call('ZREMRANGEBYSCORE', key, '-inf', '(' .. ARGV[1])
local edge = redis.call('ZRANGEBYSCORE', key, ARGV[1], ARGV[1])
for _, m in ipairs(edge) do
  if string.sub(m, 1, 20) <= ARGV[2] then
    redis.call('ZREM', key, m)
  end
end
if ARGV[5] ~= '' then
  for i = 5, #ARGV, 2 do
    redis.call('ZADD', key, ARGV[i], ARGV[i + 1])
  end
  redis.call('ZREMRANGEBYRANK', key, 0, -(tonumber(ARGV[3]) + 1))
  redis.call('PEXPIRE', key, ARGV[4])
end
return redis.call('ZCARD', key)
`

// RedisWindow is a Window shared by every process using the same Redis and
// prefix. Memory per key is bounded like LocalWindow's: the script keeps at
// most limit members, and the key expires keyTTL after its last event.

type RedisWindow struct {
	rdb    redis.UniversalClient
	prefix string
	window int64 // ns
	limit  int
	ttlMs  int64
	script *luaScript

	pipelines atomic.Int64 // round trips of recordMany, for tests
}

// NewRedisWindow returns a RedisWindow over window counting exactly up to
// limit, storing key k at "<prefix>win:{k}". keyTTL below window is raised to
// window, since a shorter TTL would forget events still inside it. Times must
// be after 1970. It panics if window or limit is not positive.
func NewRedisWindow(rdb redis.UniversalClient, prefix string, window time.Duration, limit int, keyTTL time.Duration) *RedisWindow {
	if window <= 0 || limit < 1 {
		panic(fmt.Sprintf("seq: NewRedisWindow(%v, %d): window and limit must be positive", window, limit))
	}
	keyTTL = max(keyTTL, window)
	return &RedisWindow{
		rdb:    rdb,
		prefix: prefix,
		window: int64(window),
		limit:  limit,
		ttlMs:  (int64(keyTTL) + int64(time.Millisecond) - 1) / int64(time.Millisecond),
		script: newLuaScript(windowScript),
	}
}

// Limit returns the largest count Record and Count report.
func (w *RedisWindow) Limit() int { return w.limit }

// Record implements Window.
func (w *RedisWindow) Record(ctx context.Context, key string, now time.Time) (int, error) {
	ts := now.UnixNano()
	member := fmt.Sprintf("%020d:%016x", ts, rand.Uint64())
	return w.run(ctx, "window record", key, ts, strconv.FormatInt(floorDiv(ts, 1000), 10), member)
}

// Count implements Window.
func (w *RedisWindow) Count(ctx context.Context, key string, now time.Time) (int, error) {
	return w.run(ctx, "window count", key, now.UnixNano(), "", "")
}

func (w *RedisWindow) run(ctx context.Context, op, key string, ts int64, score, member string) (int, error) {
	keys, args := w.args(key, ts, score, member)
	n, err := w.script.run(ctx, w.rdb, keys, args...).Int64()
	if err != nil {
		return 0, redisError(ctx, op, err)
	}
	return int(n), nil
}

// recordMany records the events of every key (timestamps in ns, in any
// order) in one pipeline, a script call per key, and returns each key's
// count after them, in the order of keys.
func (w *RedisWindow) recordMany(ctx context.Context, keys []string, events map[string][]int64) ([]int, error) {
	out, err := w.recordManyOnce(ctx, keys, events)
	if redis.HasErrorPrefix(err, "NOSCRIPT") {
		// A restarted or flushed Redis: load the script, try once more.
		if err := w.rdb.ScriptLoad(ctx, w.script.src).Err(); err != nil {
			return nil, redisError(ctx, "window record", err)
		}
		out, err = w.recordManyOnce(ctx, keys, events)
	}
	if err != nil {
		return nil, redisError(ctx, "window record", err)
	}
	return out, nil
}

func (w *RedisWindow) recordManyOnce(ctx context.Context, keys []string, events map[string][]int64) ([]int, error) {
	w.pipelines.Add(1)
	pipe := w.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(keys))
	for i, k := range keys {
		tss := events[k]
		newest := tss[0]
		for _, ts := range tss {
			newest = max(newest, ts)
		}
		cutoff := max(newest-w.window, -1)
		args := []any{floorDiv(cutoff, 1000), fmt.Sprintf("%020d", cutoff), w.limit, w.ttlMs}
		for _, ts := range tss {
			if ts > cutoff {
				args = append(args, strconv.FormatInt(floorDiv(ts, 1000), 10), fmt.Sprintf("%020d:%016x", ts, rand.Uint64()))
			}
		}
		cmds[i] = pipe.EvalSha(ctx, w.script.sha, []string{redisKey(w.prefix, "win", k)}, args...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	out := make([]int, len(keys))
	for i, c := range cmds {
		n, err := c.Int64()
		if err != nil {
			return nil, err
		}
		out[i] = int(n)
	}
	return out, nil
}

// args are the script's keys and arguments for an event at ts (score ""
// to count only).
func (w *RedisWindow) args(key string, ts int64, score, member string) ([]string, []any) {
	// Before 1970 nothing is stored, so a negative cutoff only needs to
	// remove nothing; -1 does that and keeps the padded string well-formed.
	cutoff := max(ts-w.window, -1)
	return []string{redisKey(w.prefix, "win", key)},
		[]any{floorDiv(cutoff, 1000), fmt.Sprintf("%020d", cutoff), w.limit, w.ttlMs, score, member}
}

// floorDiv divides rounding towards minus infinity, so that the microsecond
// of a negative nanosecond time is the one containing it.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}
