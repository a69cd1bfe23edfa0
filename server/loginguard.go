package server

import (
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/imserver/imserver/chat"
	"golang.org/x/time/rate"
)

// keyedLimiter is a token bucket per key (a username, a client address).
// In memory, per process: with several processes an attacker gets each
// process's allowance, which still bounds guessing to a few per minute.
type keyedLimiter struct {
	rate  rate.Limit
	burst int

	mu     sync.Mutex
	m      map[string]*rate.Limiter
	sweepN int
}

func newKeyedLimiter(r rate.Limit, burst int) *keyedLimiter {
	return &keyedLimiter{rate: r, burst: burst, m: make(map[string]*rate.Limiter)}
}

// reserve takes a token for key, or says how long until one is there.
func (l *keyedLimiter) reserve(key string, now time.Time) (*rate.Reservation, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lim := l.m[key]
	if lim == nil {
		lim = rate.NewLimiter(l.rate, l.burst)
		l.m[key] = lim
	}
	if l.sweepN++; l.sweepN >= 10_000 {
		l.sweepN = 0
		// A full bucket holds no state worth keeping.
		for k, x := range l.m {
			if x != lim && x.TokensAt(now) >= float64(l.burst) {
				delete(l.m, k)
			}
		}
	}
	r := lim.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return nil, d
	}
	return r, 0
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
		g.byName = newKeyedLimiter(rate.Every(time.Minute), loginFailures)
		g.byAddr = newKeyedLimiter(rate.Every(time.Minute), loginFailures)
	}
	if registerPerHour > 0 {
		g.register = newKeyedLimiter(rate.Every(time.Hour/time.Duration(registerPerHour)), registerPerHour)
	}
	return g
}

// attempt is one guarded try: call failed or succeeded when its outcome is
// known.
type attempt struct{ rs []*rate.Reservation }

// refund gives the tokens back (the try did not count).
func (a attempt) refund() {
	now := time.Now()
	for _, r := range a.rs {
		r.CancelAt(now)
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
		r, d := k.l.reserve(k.key, now)
		if r == nil {
			a.refund()
			return attempt{}, rateLimited(what, d)
		}
		a.rs = append(a.rs, r)
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
