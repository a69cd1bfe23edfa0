package seq

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Entries are stored as "<enqueue unix ms>|<payload>": text, so that the take
// script can read the time with tonumber and drop expired entries itself
// instead of handing back fewer than max live ones.

// queuePushScript appends and trims in one step so that the list never holds
// more than capacity entries, even briefly, and reports how many were lost.
// LTRIM drops the excess from the front like LPOP with a count, but also on
// Redis before 6.2.
//
// KEYS[1]  the list
// ARGV[1]  the entry
// ARGV[2]  capacity
// ARGV[3]  key TTL in ms, 0 for none
const queuePushScript = `
local n = redis.call('RPUSH', KEYS[1], ARGV[1])
local cap = tonumber(ARGV[2])
local dropped = 0
if n > cap then
  dropped = n - cap
  redis.call('LTRIM', KEYS[1], dropped, -1)
end
if tonumber(ARGV[3]) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return dropped
`

// queueTakeScript removes up to max live entries from the front, discarding
// expired ones on the way, with LRANGE + LTRIM in one atomic step so that two
// consumers never take the same entry.
//
// KEYS[1]  the list
// ARGV[1]  max
// ARGV[2]  cutoff in unix ms: entries enqueued before it are expired
const queueTakeScript = `
local key = KEYS[1]
local max = tonumber(ARGV[1])
local cutoff = tonumber(ARGV[2])
local out = {}
local seen = 0
while #out < max do
  local batch = redis.call('LRANGE', key, seen, seen + (max - #out) - 1)
  if #batch == 0 then break end
  for _, item in ipairs(batch) do
    seen = seen + 1
    local sep = string.find(item, '|', 1, true)
    if sep and tonumber(string.sub(item, 1, sep - 1)) >= cutoff then
      out[#out + 1] = string.sub(item, sep + 1)
    end
  end
end
if seen > 0 then
  redis.call('LTRIM', key, seen, -1)
end
return out
`

// RedisQueue is a Queue in Redis lists, shared by every process using the
// same Redis and prefix. Key k is stored at "<prefix>q:{k}" and expires ttl
// after its last push, when every entry in it has expired anyway.
type RedisQueue struct {
	rdb      redis.UniversalClient
	prefix   string
	capacity int
	ttl      time.Duration
	now      func() time.Time // a field so tests can move time
	push     *luaScript
	take     *luaScript
}

// NewRedisQueue returns a RedisQueue holding at most capacity entries per key
// for at most ttl each (to the millisecond); ttl <= 0 keeps entries until
// taken or pushed out. It panics if capacity is not positive.
func NewRedisQueue(rdb redis.UniversalClient, prefix string, capacity int, ttl time.Duration) *RedisQueue {
	if capacity < 1 {
		panic(fmt.Sprintf("seq: NewRedisQueue(%d, %v): capacity must be positive", capacity, ttl))
	}
	return &RedisQueue{
		rdb:      rdb,
		prefix:   prefix,
		capacity: capacity,
		ttl:      ttl,
		now:      time.Now,
		push:     newLuaScript(queuePushScript),
		take:     newLuaScript(queueTakeScript),
	}
}

func (q *RedisQueue) key(k string) string { return redisKey(q.prefix, "q", k) }

// Push implements Queue.
func (q *RedisQueue) Push(ctx context.Context, key string, payload []byte) (int, error) {
	item := strconv.AppendInt(make([]byte, 0, 14+len(payload)), q.now().UnixMilli(), 10)
	item = append(item, '|')
	item = append(item, payload...)
	var ttlMs int64
	if q.ttl > 0 {
		ttlMs = max(q.ttl.Milliseconds(), 1)
	}
	n, err := q.push.run(ctx, q.rdb, []string{q.key(key)}, item, q.capacity, ttlMs).Int64()
	if err != nil {
		return 0, redisError(ctx, "queue push", err)
	}
	return int(n), nil
}

// Take implements Queue.
func (q *RedisQueue) Take(ctx context.Context, key string, max int) ([][]byte, error) {
	if max <= 0 {
		return nil, nil
	}
	cutoff := int64(-1) // no entry is older than 1970: nothing expires
	if q.ttl > 0 {
		cutoff = q.now().Add(-q.ttl).UnixMilli()
	}
	res, err := q.take.run(ctx, q.rdb, []string{q.key(key)}, max, cutoff).Slice()
	if err != nil {
		return nil, redisError(ctx, "queue take", err)
	}
	if len(res) == 0 {
		return nil, nil
	}
	out := make([][]byte, len(res))
	for i, v := range res {
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("seq: redis queue take: entry is %T, not a string", v)
		}
		out[i] = []byte(s)
	}
	return out, nil
}

// Len implements Queue.
func (q *RedisQueue) Len(ctx context.Context, key string) (int, error) {
	n, err := q.rdb.LLen(ctx, q.key(key)).Result()
	if err != nil {
		return 0, redisError(ctx, "queue len", err)
	}
	return int(n), nil
}
