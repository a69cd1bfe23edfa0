package seq

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Bounds persists the upper bound of the seq blocks handed out, so that seqs never go back after Redis loses its data.
//
// Implementations must keep the largest bound they were given: Persist with
// a bound below the stored one leaves the stored one (two processes may
// persist out of order).
type Bounds interface {
	// Floor returns the largest seq that may ever have been handed out for conv: max(persisted bound, largest stored seq).
	Floor(ctx context.Context, conv string) (int64, error)
	// Persist durably records that seqs up to bound may be handed out for conv; it must return only once the bound is stored.
	Persist(ctx context.Context, conv string, bound int64) error
}

// RedisAllocOptions tunes a RedisAllocator; zero fields take the defaults.
type RedisAllocOptions struct {
	// GroupBlock is how many seqs a group conversation reserves per Persist
	// (default 100): one durable write per GroupBlock messages, and at most
	// that many seqs skipped when Redis loses the block.
	GroupBlock int64
	// DirectBlock is the same for direct conversations (default 50), which
	// are many and quiet, so a smaller block wastes less on a Redis flush.
	DirectBlock int64
	// LockTTL is how long a refill lock holds before others may take it over
	// (default 5s): it only matters when a holder died, and must comfortably
	// exceed a Persist, or refills are done twice.
	LockTTL time.Duration
	// MaxWait bounds how long Alloc waits for another process's refill
	// (default 2s) before it gives up with ErrUnavailable.
	MaxWait time.Duration
}

// RedisAllocator hands out per-conversation seqs from Redis, in blocks whose
// upper bound is persisted (through Bounds) before any seq of the block is
// handed out. Seqs are strictly increasing and never repeat across processes,
// Redis restarts and flushes; gaps are allowed.
//
// The hash "<prefix>seq:{conv}" holds CURR (the last seq handed out), LAST
// (the persisted bound of the current block) and LOCK ("<deadline ms>:<token>",
// held while one caller refills). Redis 7.0 has no per-field TTL, so the lock
// carries its deadline, read against the server's clock; a dead holder's lock
// lapses without touching CURR and LAST. Lua numbers are doubles, so seqs
// are exact up to 2^53.
type RedisAllocator struct {
	rdb     redis.UniversalClient
	prefix  string
	bounds  Bounds
	opts    RedisAllocOptions
	malloc  *luaScript
	refill  *luaScript
	release *luaScript
}

// Replies of allocMallocScript; allocRefillScript answers allocOK or allocLost.
const (
	allocOK      = 0  // {0, first}
	allocMissing = 1  // {1, CURR or 0}: no block in Redis; the caller now holds the lock
	allocLocked  = 2  // {2, ms left}: someone else is refilling
	allocUsedUp  = 3  // {3, CURR, LAST}: block too short for n; the caller now holds the lock
	allocLost    = -1 // {-1}: the caller's lock was taken over or Redis lost the key
)

// allocMallocScript is the fast path: one round trip per Alloc while the
// block lasts. It serves from the block even while someone holds the lock:
// a refill only raises LAST, so what fits below the current LAST is safe.
//
// KEYS[1]  the hash
// ARGV[1]  n
// ARGV[2]  the caller's lock token
// ARGV[3]  lock TTL in ms
const allocMallocScript = `
local key = KEYS[1]
local n = tonumber(ARGV[1])
local v = redis.call('HMGET', key, 'CURR', 'LAST')
local curr, last = tonumber(v[1]), tonumber(v[2])
if curr and last and curr + n <= last then
  return {0, redis.call('HINCRBY', key, 'CURR', n) - n + 1}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lock = redis.call('HGET', key, 'LOCK')
if lock then
  local sep = string.find(lock, ':', 1, true)
  local deadline = tonumber(string.sub(lock, 1, sep - 1))
  if deadline > now and string.sub(lock, sep + 1) ~= ARGV[2] then
    return {2, deadline - now}
  end
end
redis.call('HSET', key, 'LOCK', string.format('%.0f', now + tonumber(ARGV[3])) .. ':' .. ARGV[2])
if curr and last then
  return {3, curr, last}
end
return {1, curr or 0}
`

// allocRefillScript installs a persisted block and serves n seqs from it,
// only if the caller still holds the lock: otherwise another caller may have
// installed a block since, and this one's bound could be stale.
//
// KEYS[1]  the hash
// ARGV[1]  the caller's lock token
// ARGV[2]  CURR to start from when the key had none (the floor)
// ARGV[3]  the new LAST, already persisted
// ARGV[4]  n
const allocRefillScript = `
local key = KEYS[1]
local lock = redis.call('HGET', key, 'LOCK')
if not lock or string.sub(lock, string.find(lock, ':', 1, true) + 1) ~= ARGV[1] then
  return {-1}
end
local curr = math.max(tonumber(redis.call('HGET', key, 'CURR') or ARGV[2]), tonumber(ARGV[2]))
local last = tonumber(ARGV[3])
local n = tonumber(ARGV[4])
if curr + n > last then
  return {-1}
end
redis.call('HSET', key, 'CURR', string.format('%.0f', curr + n), 'LAST', ARGV[3])
redis.call('HDEL', key, 'LOCK')
return {0, curr + 1}
`

// allocReleaseScript drops the caller's lock after a failed refill, so that
// others need not wait for LockTTL.
//
// KEYS[1]  the hash
// ARGV[1]  the caller's lock token
const allocReleaseScript = `
local lock = redis.call('HGET', KEYS[1], 'LOCK')
if lock and string.sub(lock, string.find(lock, ':', 1, true) + 1) == ARGV[1] then
  redis.call('HDEL', KEYS[1], 'LOCK')
end
return 0
`

// NewRedisAllocator returns a RedisAllocator keeping its hashes under prefix
// and its bounds in bounds.
func NewRedisAllocator(rdb redis.UniversalClient, prefix string, bounds Bounds, opts RedisAllocOptions) *RedisAllocator {
	if opts.GroupBlock <= 0 {
		opts.GroupBlock = 100
	}
	if opts.DirectBlock <= 0 {
		opts.DirectBlock = 50
	}
	if opts.LockTTL <= 0 {
		opts.LockTTL = 5 * time.Second
	}
	if opts.MaxWait <= 0 {
		opts.MaxWait = 2 * time.Second
	}
	return &RedisAllocator{
		rdb:     rdb,
		prefix:  prefix,
		bounds:  bounds,
		opts:    opts,
		malloc:  newLuaScript(allocMallocScript),
		refill:  newLuaScript(allocRefillScript),
		release: newLuaScript(allocReleaseScript),
	}
}

// Alloc reserves n consecutive seqs for conv and returns the first; direct selects the direct block size.
//
// Errors from Redis wrap ErrUnavailable when Redis cannot be reached, as
// does waiting longer than MaxWait for another caller's refill; errors from
// Bounds are returned wrapped as they are.
func (a *RedisAllocator) Alloc(ctx context.Context, conv string, n int64, direct bool) (first int64, err error) {
	if n < 1 {
		return 0, fmt.Errorf("seq: alloc %d seqs for %q: n must be positive", n, conv)
	}
	block := a.opts.GroupBlock
	if direct {
		block = a.opts.DirectBlock
	}
	block = max(block, n)
	key := redisKey(a.prefix, "seq", conv)
	token := strconv.FormatUint(rand.Uint64(), 36)
	return a.alloc(ctx, conv, n, block, key, token, nil)
}

// alloc is Alloc's loop; reply, when not nil, is the answer of a malloc
// script already run with token (AllocMany's pipeline).
func (a *RedisAllocator) alloc(ctx context.Context, conv string, n, block int64, key, token string, reply []int64) (first int64, err error) {
	lockTTL := max(a.opts.LockTTL.Milliseconds(), 1)
	var giveUp time.Time // set when we first have to wait for someone else
	for {
		res := reply
		reply = nil
		if res == nil {
			res, err = a.malloc.run(ctx, a.rdb, []string{key}, n, token, lockTTL).Int64Slice()
			if err != nil {
				return 0, redisError(ctx, "alloc", err)
			}
		}
		if len(res) < 2 {
			return 0, fmt.Errorf("seq: alloc for %q: unexpected script reply %v", conv, res)
		}
		var start, last int64
		switch res[0] {
		case allocOK:
			return res[1], nil
		case allocLocked:
			if giveUp.IsZero() {
				giveUp = time.Now().Add(a.opts.MaxWait)
			}
			if err := a.waitForRefill(ctx, conv, giveUp, time.Duration(res[1])*time.Millisecond); err != nil {
				return 0, err
			}
			continue
		case allocMissing:
			floor, err := a.bounds.Floor(ctx, conv)
			if err != nil {
				a.unlock(ctx, key, token)
				return 0, fmt.Errorf("seq: alloc for %q: floor: %w", conv, err)
			}
			start = max(floor, res[1])
			last = start
		case allocUsedUp:
			start, last = res[1], max(res[1], res[2])
		default:
			return 0, fmt.Errorf("seq: alloc for %q: unexpected script reply %v", conv, res)
		}

		// The bound must be durable before Redis may hand out anything
		// below it: after a flush, Floor is all that is left of this block.
		newLast := last + block
		if err := a.bounds.Persist(ctx, conv, newLast); err != nil {
			a.unlock(ctx, key, token)
			return 0, fmt.Errorf("seq: alloc for %q: persist bound %d: %w", conv, newLast, err)
		}
		res, err = a.refill.run(ctx, a.rdb, []string{key}, token, start, newLast, n).Int64Slice()
		if err != nil {
			return 0, redisError(ctx, "alloc refill", err)
		}
		if len(res) == 2 && res[0] == allocOK {
			return res[1], nil
		}
		// Lost the lock (our Persist outlived LockTTL, or Redis lost the
		// key): the block we persisted becomes a gap, and we start over.
		if giveUp.IsZero() {
			giveUp = time.Now().Add(a.opts.MaxWait)
		}
		if time.Now().After(giveUp) {
			return 0, fmt.Errorf("seq: alloc for %q: refill lock lost repeatedly for %v: %w", conv, a.opts.MaxWait, ErrUnavailable)
		}
	}
}

// AllocReq is one conversation's request of AllocMany.
type AllocReq struct {
	Conv   string
	N      int64
	Direct bool
}

// AllocMany is Alloc for several conversations, their first attempts in
// one pipelined round trip: a writer's batch reserves seqs for every
// conversation it appends to, and one round trip each (inside the write
// transaction) was a tenth of a node's CPU with several nodes. The
// conversations whose block is used up, missing or being refilled go on
// one by one, as in Alloc. firsts[i] and errs[i] answer reqs[i].
func (a *RedisAllocator) AllocMany(ctx context.Context, reqs []AllocReq) (firsts []int64, errs []error) {
	firsts, errs = make([]int64, len(reqs)), make([]error, len(reqs))
	keys, tokens, blocks := make([]string, len(reqs)), make([]string, len(reqs)), make([]int64, len(reqs))
	lockTTL := max(a.opts.LockTTL.Milliseconds(), 1)
	pipe := a.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(reqs))
	for i, r := range reqs {
		if r.N < 1 {
			errs[i] = fmt.Errorf("seq: alloc %d seqs for %q: n must be positive", r.N, r.Conv)
			continue
		}
		blocks[i] = a.opts.GroupBlock
		if r.Direct {
			blocks[i] = a.opts.DirectBlock
		}
		blocks[i] = max(blocks[i], r.N)
		keys[i] = redisKey(a.prefix, "seq", r.Conv)
		tokens[i] = strconv.FormatUint(rand.Uint64(), 36)
		cmds[i] = pipe.EvalSha(ctx, a.malloc.sha, []string{keys[i]}, r.N, tokens[i], lockTTL)
	}
	_, _ = pipe.Exec(ctx) // each command's error is looked at below
	for i, r := range reqs {
		if errs[i] != nil {
			continue
		}
		// A command that failed (NOSCRIPT after a Redis restart, a lost
		// connection) is run again alone, which loads the script or
		// reports the outage.
		reply, err := cmds[i].Int64Slice()
		if err != nil {
			reply = nil
		}
		firsts[i], errs[i] = a.alloc(ctx, r.Conv, r.N, blocks[i], keys[i], tokens[i], reply)
	}
	return firsts, errs
}

// waitForRefill sleeps until another caller's refill has likely finished: a
// few milliseconds (a Persist), never past the lock's deadline or giveUp.
func (a *RedisAllocator) waitForRefill(ctx context.Context, conv string, giveUp time.Time, lockLeft time.Duration) error {
	left := time.Until(giveUp)
	if left <= 0 {
		return fmt.Errorf("seq: alloc for %q: waited %v for another refill: %w", conv, a.opts.MaxWait, ErrUnavailable)
	}
	// Jitter spreads the waiters so they do not all hit Redis at once.
	d := min(time.Millisecond+rand.N(4*time.Millisecond), lockLeft+time.Millisecond, left)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("seq: alloc for %q: %w", conv, ctx.Err())
	case <-t.C:
		return nil
	}
}

// unlock releases the refill lock after a failure, best effort: if it fails
// too, the lock lapses after LockTTL. It runs even if ctx is done, since a
// cancelled caller should not make everyone else wait.
func (a *RedisAllocator) unlock(ctx context.Context, key, token string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_ = a.release.run(ctx, a.rdb, []string{key}, token).Err()
}
