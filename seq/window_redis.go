package seq

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
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
  redis.call('ZADD', key, ARGV[5], ARGV[6])
  redis.call('ZREMRANGEBYRANK', key, 0, -(tonumber(ARGV[3]) + 1))
  redis.call('PEXPIRE', key, ARGV[4])
end
return redis.call('ZCARD', key)
`

// RedisWindow is a Window shared by every process using the same Redis and
// prefix. Memory per key is bounded like LocalWindow's: the script keeps at
// most limit members, and the key expires keyTTL after its last event.
//
// Records made at once share round trips (group commit): while one
// pipeline of script calls is out, the Records that arrive queue up and
// leave together in the next, each still answered its own exact count.
// Every send records one event, and a round trip per send was a tenth of
// a node's CPU (system calls) with several nodes.
type RedisWindow struct {
	rdb    redis.UniversalClient
	prefix string
	window int64 // ns
	limit  int
	ttlMs  int64
	script *luaScript

	mu    sync.Mutex
	busy  bool         // a caller is sending a pipeline
	queue []*windowRec // Records waiting for the next pipeline

	pipelines atomic.Int64 // round trips of Record, for tests
}

// windowRec is one Record waiting for its pipeline. wake gets false when
// its answer is in, true when it is to send the next pipeline itself.
type windowRec struct {
	ctx    context.Context
	key    string
	ts     int64
	score  string
	member string
	n      int
	err    error
	wake   chan bool
}

// recordTimeout bounds a pipeline sent on behalf of other callers, whose
// contexts the sender does not hold.
const recordTimeout = 5 * time.Second

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
	r := &windowRec{ctx: ctx, key: key, ts: ts, score: strconv.FormatInt(floorDiv(ts, 1000), 10),
		member: fmt.Sprintf("%020d:%016x", ts, rand.Uint64()), wake: make(chan bool, 1)}
	w.mu.Lock()
	w.queue = append(w.queue, r)
	if w.busy {
		w.mu.Unlock()
		if lead := <-r.wake; !lead {
			return r.n, r.err
		}
	} else {
		w.busy = true
		w.mu.Unlock()
	}
	// This caller sends what is queued (itself first among it), then hands
	// the turn to the first of those that queued meanwhile.
	w.mu.Lock()
	batch := w.queue
	w.queue = nil
	w.mu.Unlock()
	w.recordBatch(batch)
	for _, q := range batch {
		if q != r {
			q.wake <- false
		}
	}
	w.mu.Lock()
	if len(w.queue) > 0 {
		w.queue[0].wake <- true
	} else {
		w.busy = false
	}
	w.mu.Unlock()
	return r.n, r.err
}

// recordBatch runs the script once per Record of batch in one pipeline.
func (w *RedisWindow) recordBatch(batch []*windowRec) {
	w.pipelines.Add(1)
	if len(batch) == 1 {
		r := batch[0]
		r.n, r.err = w.run(r.ctx, "window record", r.key, r.ts, r.score, r.member)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(batch[0].ctx), recordTimeout)
	defer cancel()
	pipe := w.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(batch))
	for i, r := range batch {
		keys, args := w.args(r.key, r.ts, r.score, r.member)
		cmds[i] = pipe.EvalSha(ctx, w.script.sha, keys, args...)
	}
	_, _ = pipe.Exec(ctx)
	for i, r := range batch {
		err := cmds[i].Err()
		if redis.HasErrorPrefix(err, "NOSCRIPT") {
			// A restarted or flushed Redis: the script is loaded by the
			// call that finds it missing, the rest find it there.
			r.n, r.err = w.run(ctx, "window record", r.key, r.ts, r.score, r.member)
			continue
		}
		if err != nil {
			r.err = redisError(ctx, "window record", err)
			continue
		}
		n, err := cmds[i].Int64()
		r.n, r.err = int(n), redisError(ctx, "window record", err)
	}
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
