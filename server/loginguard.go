package server

import (
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/imserver/imserver/chat"
)

// keyedLimiter is a token bucket per key (a username, a client address).
// In memory, per process: with several processes an attacker gets each
// process's allowance, which still bounds guessing to a few per minute.
// (x/time/rate's reservations cannot be given back once their time has
// passed, and a login's outcome is known only after the password check.)
type keyedLimiter struct {
	per   time.Duration // one token is added every per
	burst float64

	mu     sync.Mutex
	m      map[string]*bucket
	sweepN int
}

type bucket struct {
	tokens float64
	last   time.Time
}

func newKeyedLimiter(per time.Duration, burst int) *keyedLimiter {
	return &keyedLimiter{per: per, burst: float64(burst), m: make(map[string]*bucket)}
}

// refill brings b to now.
func (l *keyedLimiter) refill(b *bucket, now time.Time) {
	if now.After(b.last) {
		b.tokens = min(l.burst, b.tokens+float64(now.Sub(b.last))/float64(l.per))
		b.last = now
	}
}

// take takes a token for key, or says how long until one is there.
func (l *keyedLimiter) take(key string, now time.Time) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.m[key]
	if b == nil {
		b = &bucket{tokens: l.burst, last: now}
		l.m[key] = b
	}
	if l.sweepN++; l.sweepN >= 10_000 {
		l.sweepN = 0
		// A full bucket holds no state worth keeping.
		for k, x := range l.m {
			if l.refill(x, now); x != b && x.tokens >= l.burst {
				delete(l.m, k)
			}
		}
	}
	l.refill(b, now)
	if b.tokens < 1 {
		return false, time.Duration((1 - b.tokens) * float64(l.per))
	}
	b.tokens--
	return true, 0
}

// give puts a token back.
func (l *keyedLimiter) give(key string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b := l.m[key]; b != nil {
		l.refill(b, now)
		b.tokens = min(l.burst, b.tokens+1)
	}
}

// guard holds the login and registration limits. A login attempt takes a
// token from the username's bucket and from the address's before the
// password is checked, so that parallel guesses cannot all slip through
// before the first failure is counted; a successful login gives them back.
type guard struct {
	byName *keyedLimiter // nil: no login limit
	byAddr *keyedLimiter
	// register counts accounts created per address (nil: no limit).
	register *keyedLimiter
}

func newGuard(loginFailures, registerPerHour int) *guard {
	g := &guard{}
	if loginFailures > 0 {
		// Refilled one a minute, as the protocol says.
		g.byName = newKeyedLimiter(time.Minute, loginFailures)
		g.byAddr = newKeyedLimiter(time.Minute, loginFailures)
	}
	if registerPerHour > 0 {
		g.register = newKeyedLimiter(time.Hour/time.Duration(registerPerHour), registerPerHour)
	}
	return g
}

// attempt is one guarded try: call failed or succeeded when its outcome is
// known.
type attempt struct{ taken []limiterKey }

// refund gives the tokens back (the try did not count).
func (a attempt) refund() {
	now := time.Now()
	for _, k := range a.taken {
		k.l.give(k.key, now)
	}
}

func rateLimited(what string, d time.Duration) error {
	return &chat.Error{Code: chat.ERateLimited, Message: what + "; try again later", RetryAfterMS: max(1, d.Milliseconds())}
}

// limiterKey names one bucket of one limiter.
type limiterKey struct {
	l   *keyedLimiter
	key string
}

// take reserves one token from each limiter that is set, or none.
func take(now time.Time, what string, keyed ...limiterKey) (attempt, error) {
	var a attempt
	for _, k := range keyed {
		if k.l == nil {
			continue
		}
		ok, d := k.l.take(k.key, now)
		if !ok {
			a.refund()
			return attempt{}, rateLimited(what, d)
		}
		a.taken = append(a.taken, k)
	}
	return a, nil
}

// login reserves a failed login for username and addr.
func (g *guard) login(username string, addr netip.Addr) (attempt, error) {
	return take(time.Now(), "too many failed logins",
		limiterKey{g.byName, strings.ToLower(strings.TrimSpace(username))},
		limiterKey{g.byAddr, addr.String()})
}

// guess reserves a failed guess of a secret other than a password (an
// invite code) from addr's login bucket: guessing invites is guessing.
func (g *guard) guess(addr netip.Addr) (attempt, error) {
	return take(time.Now(), "too many failed attempts", limiterKey{g.byAddr, addr.String()})
}

// registration reserves an account creation for addr.
func (g *guard) registration(addr netip.Addr) (attempt, error) {
	return take(time.Now(), "too many registrations from this address", limiterKey{g.register, addr.String()})
}
