package chat

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// sendLimits is a token bucket per user.
type sendLimits struct {
	rate  rate.Limit
	burst int

	mu     sync.Mutex
	m      map[string]*rate.Limiter
	sweepN int
}

func newSendLimits(perSecond float64, burst int) *sendLimits {
	return &sendLimits{rate: rate.Limit(perSecond), burst: burst, m: make(map[string]*rate.Limiter)}
}

// blocked reports whether user's bucket is empty, without taking a token,
// and how long until it holds one.
func (l *sendLimits) blocked(user string, now time.Time) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lim := l.m[user]
	if lim == nil || lim.TokensAt(now) >= 1 {
		return 0, false
	}
	return time.Duration((1 - lim.TokensAt(now)) / float64(l.rate) * float64(time.Second)), true
}

// allow takes a token for user, or says how long until one is available.
func (l *sendLimits) allow(user string, now time.Time) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lim := l.m[user]
	if lim == nil {
		lim = rate.NewLimiter(l.rate, l.burst)
		l.m[user] = lim
	}
	l.sweepN++
	if l.sweepN >= 10_000 {
		l.sweepN = 0
		// A full bucket holds no state worth keeping.
		for u, x := range l.m {
			if x != lim && x.TokensAt(now) >= float64(l.burst) {
				delete(l.m, u)
			}
		}
	}
	r := lim.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}
