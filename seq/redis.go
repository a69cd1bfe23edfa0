package seq

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The Redis-backed types take any redis.UniversalClient and leave its options
// to the caller. For Alloc, Record and friends to fail fast when Redis is down,
// build the client with ContextTimeoutEnabled: true (so a context deadline cuts
// a blocked read) and short DialTimeout/ReadTimeout; with go-redis defaults a
// dead server costs a few seconds of dial retries before the error comes back.

// luaScript runs a script by its SHA-1 so that each call sends only the digest.
// On NOSCRIPT (a restarted or flushed server) it loads the source with SCRIPT
// LOAD and tries once more, so the source crosses the wire once per server
// lifetime rather than on every miss as EVAL would.
type luaScript struct {
	src string
	sha string
}

func newLuaScript(src string) *luaScript {
	sum := sha1.Sum([]byte(src))
	return &luaScript{src: src, sha: hex.EncodeToString(sum[:])}
}

func (s *luaScript) run(ctx context.Context, c redis.Scripter, keys []string, args ...any) *redis.Cmd {
	cmd := c.EvalSha(ctx, s.sha, keys, args...)
	if !redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		return cmd
	}
	if err := c.ScriptLoad(ctx, s.src).Err(); err != nil {
		cmd.SetErr(err)
		return cmd
	}
	return c.EvalSha(ctx, s.sha, keys, args...)
}

// unavailableReplies are the server replies that mean "not now" rather than
// "wrong request": a retry against a healthy server would succeed, so callers
// should treat them like a lost connection.
var unavailableReplies = []string{"LOADING", "BUSY", "MASTERDOWN", "READONLY", "CLUSTERDOWN", "TRYAGAIN", "NOREPLICAS", "MISCONF", "OOM"}

// redisError wraps err from a Redis call made for op. Everything that is not
// a definite reply from a healthy server (network errors, timeouts, a closed
// client or pool, the replies above) wraps ErrUnavailable, so callers can fall
// back or answer `unavailable`. A cancelled caller context is passed through
// without ErrUnavailable: the caller gave up, Redis did not fail.
func redisError(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return fmt.Errorf("seq: redis %s: %w", op, err)
	}
	var reply redis.Error
	if errors.As(err, &reply) && !isUnavailableReply(err) {
		return fmt.Errorf("seq: redis %s: %w", op, err)
	}
	return fmt.Errorf("seq: redis %s: %w: %w", op, ErrUnavailable, err)
}

func isUnavailableReply(err error) bool {
	for _, p := range unavailableReplies {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}

// redisKey builds "<prefix><kind>:{<id>}". Every script touches one key, so
// Cluster is safe already; the braces make id the hash tag so that the keys
// of one conversation share a slot should a script ever need two of them.
func redisKey(prefix, kind, id string) string {
	var b strings.Builder
	b.Grow(len(prefix) + len(kind) + len(id) + 3)
	b.WriteString(prefix)
	b.WriteString(kind)
	b.WriteString(":{")
	b.WriteString(id)
	b.WriteString("}")
	return b.String()
}
