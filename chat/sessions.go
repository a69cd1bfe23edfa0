package chat

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"
)

// Session is a token as its user sees it. ID is random, not derived from
// the token, so it can be shown and used to end the session without being
// a credential.
type Session struct {
	ID         string `json:"id"`
	CreatedAt  int64  `json:"created_at"`
	LastUsedAt int64  `json:"last_used_at"`
	UserAgent  string `json:"user_agent"`
	Address    string `json:"address"`
	Current    bool   `json:"current"`
	// TokenHash identifies the token's live sockets; never sent.
	TokenHash []byte `json:"-"`
}

// SessionUse is the latest use of a token, written in batches.
type SessionUse struct {
	TokenHash  []byte
	LastUsedAt int64
	UserAgent  string
	Address    string
}

// Client is who makes a request: its user agent and its address.
type Client struct {
	UserAgent string
	Address   string
}

type clientKey struct{}

// WithClient attaches the requesting client to ctx; tokens issued and
// used under ctx record it. The transport sets it once per request, so
// that the use cases keep their signatures.
func WithClient(ctx context.Context, c Client) context.Context {
	return context.WithValue(ctx, clientKey{}, c)
}

func clientOf(ctx context.Context) Client {
	c, _ := ctx.Value(clientKey{}).(Client)
	return c
}

// Limits of what a session records of its client.
const (
	maxUserAgentLen = 256
	maxAddressLen   = 64
)

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	// Cut at a rune boundary so the stored text stays valid UTF-8.
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}

// sessionUses keeps the latest use of each token in memory, so that a
// request costs no write: the flush writes each token's use at most once
// per SessionFlushInterval.
type sessionUses struct {
	mu sync.Mutex
	m  map[string]*sessionUse
}

type sessionUse struct {
	SessionUse
	dirty bool
}

func newSessionUses() *sessionUses { return &sessionUses{m: make(map[string]*sessionUse)} }

func (u *sessionUses) record(hash []byte, now int64, c Client) {
	u.mu.Lock()
	defer u.mu.Unlock()
	e := u.m[string(hash)]
	if e == nil {
		e = &sessionUse{SessionUse: SessionUse{TokenHash: hash}}
		u.m[string(hash)] = e
	}
	e.LastUsedAt = max(e.LastUsedAt, now)
	if c.UserAgent != "" {
		e.UserAgent = clip(c.UserAgent, maxUserAgentLen)
	}
	if c.Address != "" {
		e.Address = clip(c.Address, maxAddressLen)
	}
	e.dirty = true
}

// last returns the last use known in memory, 0 when none.
func (u *sessionUses) last(hash []byte) (SessionUse, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if e := u.m[string(hash)]; e != nil {
		return e.SessionUse, true
	}
	return SessionUse{}, false
}

// take returns the uses not written yet. Entries unused since the previous
// take are dropped: the store has them, and memory stays bounded by the
// tokens of the last two intervals.
func (u *sessionUses) take() []SessionUse {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []SessionUse
	for k, e := range u.m {
		if !e.dirty {
			delete(u.m, k)
			continue
		}
		out = append(out, e.SessionUse)
		e.dirty = false
	}
	return out
}

// putBack marks uses whose write failed dirty again, for the next flush.
func (u *sessionUses) putBack(uses []SessionUse) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, s := range uses {
		e := u.m[string(s.TokenHash)]
		if e == nil {
			e = &sessionUse{SessionUse: s}
			u.m[string(s.TokenHash)] = e
		}
		e.LastUsedAt = max(e.LastUsedAt, s.LastUsedAt)
		e.dirty = true
	}
}

func (s *Service) flushSessionUses() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if uses := s.uses.take(); len(uses) > 0 {
		if err := s.store.TouchSessions(ctx, uses); err != nil {
			if ErrorCode(err) != EUnavailable {
				s.log.Error("saving sessions' last use", "n", len(uses), "err", err)
			}
			s.uses.putBack(uses)
			return
		}
	}
	// Expired tokens are refused anyway; deleting them keeps them out of
	// the sessions list and the table small. The uses just written make
	// the stored last uses current.
	usedBefore, createdBefore := s.expiryBounds(time.Now())
	if usedBefore == 0 && createdBefore == 0 {
		return
	}
	if err := s.store.DeleteExpiredSessions(ctx, usedBefore, createdBefore); err != nil && ErrorCode(err) != EUnavailable {
		s.log.Error("deleting expired sessions", "err", err)
	}
}

// expiryBounds returns the last use and the creation time (Unix ms) before
// which a session has expired at now; 0 where the configuration sets none.
func (s *Service) expiryBounds(now time.Time) (usedBefore, createdBefore int64) {
	if s.cfg.TokenIdle > 0 {
		usedBefore = now.Add(-s.cfg.TokenIdle).UnixMilli()
	}
	if s.cfg.TokenMaxAge > 0 {
		createdBefore = now.Add(-s.cfg.TokenMaxAge).UnixMilli()
	}
	return usedBefore, createdBefore
}

func (s *Service) flushSessionUsesLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.SessionFlushInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			s.flushSessionUses()
		case <-s.stop:
			s.flushSessionUses()
			return
		}
	}
}

// authorize returns the user and session of a token hash, refusing a token
// unused for TokenIdle or older than TokenMaxAge, and records the use.
func (s *Service) authorize(ctx context.Context, hash []byte) (User, Session, error) {
	u, sess, err := s.store.SessionByToken(ctx, hash)
	if ErrorCode(err) == ENotFound {
		return User{}, Session{}, Errorf(EUnauthorized, "invalid or revoked token")
	} else if err != nil {
		return User{}, Session{}, err
	}
	now := time.Now()
	if use, ok := s.uses.last(hash); ok && use.LastUsedAt > sess.LastUsedAt {
		sess.LastUsedAt = use.LastUsedAt
	}
	if s.expired(sess, now) {
		return User{}, Session{}, Errorf(EUnauthorized, "session expired; log in again")
	}
	s.uses.record(hash, now.UnixMilli(), clientOf(ctx))
	return u, sess, nil
}

// expired reports whether sess (its last use as known here) may no
// longer be used.
func (s *Service) expired(sess Session, now time.Time) bool {
	usedBefore, createdBefore := s.expiryBounds(now)
	return sess.LastUsedAt < usedBefore || sess.CreatedAt < createdBefore
}

// KeepAlive is an open socket's use of its session (tokenHash, created
// at createdAt): recorded as a use, so that a socket's session does not
// expire for idleness while the socket is open. False once the session is
// past TokenMaxAge, or its token is gone: the socket must close.
//
// A token revoked here closes its sockets at once (logout, password,
// disabling), and in other processes through the bus; the look-up catches
// what no bus told: `imserver user passwd` or `user remove` run beside a
// server without Redis, a logout the bus lost. A store that cannot answer
// keeps the socket until the next call.
func (s *Service) KeepAlive(ctx context.Context, tokenHash []byte, createdAt int64, now time.Time) bool {
	if _, createdBefore := s.expiryBounds(now); createdAt < createdBefore {
		return false
	}
	// TokenValid records the use; the socket's last one is at most
	// KeepAliveEvery old, so idleness never ends it.
	ok, err := s.TokenValid(ctx, tokenHash)
	return ok || err != nil
}

// KeepAliveEvery is how often open sockets call KeepAlive: well within
// TokenIdle, and often enough that a socket outlives its session's max
// age by a twentieth of it at most (a minute at most).
func (s *Service) KeepAliveEvery() time.Duration {
	d := time.Minute
	if s.cfg.TokenIdle > 0 {
		d = min(d, s.cfg.TokenIdle/4)
	}
	if s.cfg.TokenMaxAge > 0 {
		d = min(d, s.cfg.TokenMaxAge/20)
	}
	return max(d, 50*time.Millisecond)
}

// Authorize returns the user and session a token opens.
func (s *Service) Authorize(ctx context.Context, token string) (User, Session, error) {
	if token == "" {
		return User{}, Session{}, Errorf(EUnauthorized, "missing token")
	}
	return s.authorize(ctx, TokenHash(token))
}

// Sessions lists my sessions, newest use first; the one of token is
// current.
func (s *Service) Sessions(ctx context.Context, me, token string) ([]Session, error) {
	list, err := s.store.Sessions(ctx, me)
	if err != nil {
		return nil, err
	}
	cur := string(TokenHash(token))
	now := time.Now()
	live := list[:0]
	for i := range list {
		if use, ok := s.uses.last(list[i].TokenHash); ok {
			list[i].LastUsedAt = max(list[i].LastUsedAt, use.LastUsedAt)
			if use.UserAgent != "" {
				list[i].UserAgent = use.UserAgent
			}
			if use.Address != "" {
				list[i].Address = use.Address
			}
		}
		list[i].Current = string(list[i].TokenHash) == cur
		if !s.expired(list[i], now) {
			live = append(live, list[i])
		}
	}
	// The store orders by the uses it holds; the ones in memory are newer.
	slices.SortStableFunc(live, func(a, b Session) int { return cmp.Compare(b.LastUsedAt, a.LastUsedAt) })
	return live, nil
}

// EndSession revokes one of my sessions and returns its token hash, so
// that the transport closes its sockets. Another user's session is
// ENotFound, as an unknown one is: ids are not confirmed to strangers.
func (s *Service) EndSession(ctx context.Context, me, id string) ([]byte, error) {
	if id == "" || !storable(id) {
		return nil, Errorf(ENotFound, "session not found")
	}
	return s.store.DeleteSession(ctx, me, id)
}

// EndOtherSessions revokes every session of mine but the one of token and
// returns their token hashes.
func (s *Service) EndOtherSessions(ctx context.Context, me, token string) ([][]byte, error) {
	return s.store.DeleteOtherSessions(ctx, me, TokenHash(token))
}

// ChangePassword checks my old password, sets the new one and ends every
// other session of mine (a leaked password may have opened them); it
// returns their token hashes. Wrong old passwords are limited per user as
// failed logins are, so that a stolen token cannot guess the password.
func (s *Service) ChangePassword(ctx context.Context, me User, token, oldPassword, newPassword string) ([][]byte, error) {
	if oldPassword == "" || newPassword == "" {
		// A malformed request, not a guess: it is not counted as one.
		return nil, Errorf(EBadRequest, "old_password and new_password are required")
	}
	now := time.Now()
	if wait, blocked := s.pwFailures.blocked(me.ID, now); blocked {
		return nil, rateLimited("too many wrong passwords", wait)
	}
	_, hash, err := s.store.UserByName(ctx, me.Username)
	if err != nil {
		return nil, err
	}
	ok, err := s.check(ctx, hash, oldPassword)
	if err != nil {
		return nil, err
	}
	if !ok {
		s.pwFailures.allow(me.ID, now)
		// 403, not 401: the token is fine, and clients take a 401 as
		// "logged out".
		return nil, Errorf(EForbidden, "wrong password")
	}
	if err := checkPasswordRules(newPassword); err != nil {
		return nil, err
	}
	newHash, err := s.hash(ctx, newPassword)
	if err != nil {
		return nil, err
	}
	return s.store.ChangePassword(ctx, me.ID, newHash, TokenHash(token))
}

func rateLimited(msg string, wait time.Duration) *Error {
	return &Error{Code: ERateLimited, Message: msg, RetryAfterMS: max(1, wait.Milliseconds())}
}

// NewTicket returns a one-time ticket for opening a WebSocket as the
// session of token, and when it expires (Unix ms). Only its hash is
// stored, in the database, so every process sharing it accepts it.
func (s *Service) NewTicket(ctx context.Context, me, token string) (string, int64, error) {
	t, h, err := newToken()
	if err != nil {
		return "", 0, err
	}
	exp := time.Now().Add(s.cfg.TicketTTL).UnixMilli()
	if err := s.store.CreateTicket(ctx, h, me, TokenHash(token), exp); err != nil {
		return "", 0, err
	}
	return t, exp, nil
}

// CheckTicket returns the user and session a ticket would open, without
// spending it (the socket may yet be refused); a used, expired or unknown
// ticket is EUnauthorized.
func (s *Service) CheckTicket(ctx context.Context, ticket string) (User, Session, error) {
	return s.ticketSession(ctx, ticket, s.store.TicketToken)
}

// UseTicket spends a ticket and returns the user and session it opens; a
// used, expired or unknown ticket is EUnauthorized.
func (s *Service) UseTicket(ctx context.Context, ticket string) (User, Session, error) {
	return s.ticketSession(ctx, ticket, s.store.UseTicket)
}

// ticketSession finds the token hash of ticket with find (looking at it
// or spending it) and authorizes it: the session that asked for the
// ticket may have ended since.
func (s *Service) ticketSession(ctx context.Context, ticket string, find func(context.Context, []byte, int64) ([]byte, error)) (User, Session, error) {
	if ticket == "" {
		return User{}, Session{}, Errorf(EUnauthorized, "missing ticket")
	}
	tokenHash, err := find(ctx, TokenHash(ticket), time.Now().UnixMilli())
	if ErrorCode(err) == ENotFound {
		return User{}, Session{}, Errorf(EUnauthorized, "invalid, used or expired ticket")
	} else if err != nil {
		return User{}, Session{}, err
	}
	return s.authorize(ctx, tokenHash)
}
