package chat

import (
	"context"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Limits of account fields.
const (
	maxUsernameLen    = 32
	minPasswordLen    = 8
	maxPasswordLen    = 1024
	maxDisplayNameLen = 64
)

func validUsername(name string) bool {
	if name == "" || len(name) > maxUsernameLen {
		return false
	}
	for _, r := range name {
		if !(r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' || r == '-' || r == '.')) {
			return false
		}
	}
	return true
}

func (s *Service) hash(ctx context.Context, password string) (string, error) {
	select {
	case s.hashing <- struct{}{}:
	case <-ctx.Done():
		return "", Errorf(EUnavailable, "server busy")
	}
	defer func() { <-s.hashing }()
	return hashPassword(password)
}

func (s *Service) check(ctx context.Context, hash, password string) (bool, error) {
	select {
	case s.hashing <- struct{}{}:
	case <-ctx.Done():
		return false, Errorf(EUnavailable, "server busy")
	}
	defer func() { <-s.hashing }()
	return checkPassword(hash, password), nil
}

func checkPasswordRules(password string) error {
	if utf8.RuneCountInString(password) < minPasswordLen {
		return Errorf(EBadRequest, "password must have at least %d characters", minPasswordLen)
	}
	if len(password) > maxPasswordLen {
		return Errorf(EBadRequest, "password is too long")
	}
	return nil
}

// AddUser creates an account whatever the registration setting (the CLI
// and tests use it).
func (s *Service) AddUser(ctx context.Context, username, password, displayName string) (User, error) {
	u, hash, err := s.newUser(ctx, username, password, displayName)
	if err != nil {
		return User{}, err
	}
	if err := s.store.CreateUser(ctx, u, hash); err != nil {
		return User{}, err
	}
	return u, nil
}

// newUser checks the fields of a new account and hashes its password.
func (s *Service) newUser(ctx context.Context, username, password, displayName string) (User, string, error) {
	username = strings.TrimSpace(username)
	displayName = strings.TrimSpace(displayName)
	if !validUsername(username) {
		return User{}, "", Errorf(EBadRequest, "username must be 1-%d letters, digits, '_', '-' or '.'", maxUsernameLen)
	}
	if err := checkPasswordRules(password); err != nil {
		return User{}, "", err
	}
	if displayName == "" {
		displayName = username
	}
	if utf8.RuneCountInString(displayName) > maxDisplayNameLen || !storable(displayName) {
		return User{}, "", Errorf(EBadRequest, "display_name must be at most %d characters of UTF-8, without NUL", maxDisplayNameLen)
	}
	hash, err := s.hash(ctx, password)
	if err != nil {
		return User{}, "", err
	}
	return User{ID: NewID(), Username: username, DisplayName: displayName}, hash, nil
}

// Register creates an account and logs it in.
func (s *Service) Register(ctx context.Context, username, password, displayName string) (User, string, error) {
	return s.RegisterWithInvite(ctx, username, password, displayName, "")
}

// ErrBadInvite answers a registration with an invite that is unknown,
// revoked, expired or used up. One error for all, so that a guesser learns
// nothing; the server counts these as failed guesses.
var ErrBadInvite = &Error{Code: EForbidden, Message: "this invite is invalid, expired or used up"}

// RegisterWithInvite creates an account and logs it in. In invite mode
// invite is required; in open mode a given invite is used (and must be
// good); closed takes only an invite an admin (or the command line) made.
func (s *Service) RegisterWithInvite(ctx context.Context, username, password, displayName, invite string) (User, string, error) {
	switch s.cfg.Registration {
	case RegisterClosed:
		if invite == "" {
			return User{}, "", Errorf(EForbidden, "registration is closed: it needs an invite from an admin")
		}
		if len(invite) > 256 {
			return User{}, "", ErrBadInvite
		}
		if ok, err := s.adminInvite(ctx, invite); err != nil {
			return User{}, "", err
		} else if !ok {
			return User{}, "", ErrBadInvite
		}
	case RegisterInvite:
		if invite == "" {
			return User{}, "", Errorf(EForbidden, "registration needs an invite")
		}
	}
	if len(invite) > 256 {
		return User{}, "", ErrBadInvite
	}
	u, hash, err := s.newUser(ctx, username, password, displayName)
	if err != nil {
		return User{}, "", err
	}
	if invite == "" {
		err = s.store.CreateUser(ctx, u, hash)
	} else {
		err = s.store.CreateInvitedUser(ctx, u, hash, inviteHash(invite), time.Now().UnixMilli())
	}
	if err != nil {
		return User{}, "", err
	}
	tok, err := s.issueToken(ctx, u.ID)
	return u, tok, err
}

// Login checks a password and returns a new token.
func (s *Service) Login(ctx context.Context, username, password string) (User, string, error) {
	var u User
	var hash string
	var err error = errNoSuch // a name no account can hold
	if storable(username) {
		u, hash, err = s.store.UserByName(ctx, strings.TrimSpace(username))
	}
	if ErrorCode(err) == ENotFound {
		// Spend the same time as a wrong password, so that response times
		// do not tell which usernames exist.
		_, _ = s.check(ctx, dummyHash, password)
		return User{}, "", Errorf(EUnauthorized, "wrong username or password")
	} else if err != nil {
		return User{}, "", err
	}
	ok, err := s.check(ctx, hash, password)
	if err != nil {
		return User{}, "", err
	}
	if !ok {
		return User{}, "", Errorf(EUnauthorized, "wrong username or password")
	}
	// Told only to whoever knows the password: a disabled account's owner.
	if disabled, err := s.store.UserDisabled(ctx, u.ID); err != nil {
		return User{}, "", err
	} else if disabled {
		return User{}, "", ErrDisabled
	}
	tok, err := s.issueToken(ctx, u.ID)
	return u, tok, err
}

var dummyHash, _ = hashPassword("not a password of anyone")

func (s *Service) issueToken(ctx context.Context, userID string) (string, error) {
	tok, h, err := newToken()
	if err != nil {
		return "", err
	}
	c := clientOf(ctx)
	now := time.Now().UnixMilli()
	sess := Session{ID: NewID(), CreatedAt: now, LastUsedAt: now, UserAgent: clip(c.UserAgent, maxUserAgentLen), Address: clip(c.Address, maxAddressLen), TokenHash: h}
	if err := s.store.CreateToken(ctx, userID, h, sess); err != nil {
		return "", err
	}
	return tok, nil
}

// Authenticate returns the user a token belongs to.
func (s *Service) Authenticate(ctx context.Context, token string) (User, error) {
	u, _, err := s.Authorize(ctx, token)
	return u, err
}

// TokenValid reports whether the token with this hash (see TokenHash)
// still opens sessions.
func (s *Service) TokenValid(ctx context.Context, tokenHash []byte) (bool, error) {
	_, _, err := s.authorize(ctx, tokenHash)
	if ErrorCode(err) == EUnauthorized {
		return false, nil
	}
	return err == nil, err
}

// Logout revokes a token.
func (s *Service) Logout(ctx context.Context, token string) error {
	return s.store.DeleteToken(ctx, TokenHash(token))
}

// SetPassword changes a password and revokes every token of the user.
func (s *Service) SetPassword(ctx context.Context, username, password string) error {
	u, _, err := s.store.UserByName(ctx, username)
	if err != nil {
		return err
	}
	if err := checkPasswordRules(password); err != nil {
		return err
	}
	hash, err := s.hash(ctx, password)
	if err != nil {
		return err
	}
	if err := s.store.SetPassword(ctx, u.ID, hash); err != nil {
		return err
	}
	return s.store.DeleteUserTokens(ctx, u.ID)
}

// RemoveUser deletes an account: its tokens stop working and it leaves every
// conversation; its messages stay.
func (s *Service) RemoveUser(ctx context.Context, username string) error {
	u, _, err := s.store.UserByName(ctx, username)
	if err != nil {
		return err
	}
	if err := s.store.DeleteUser(ctx, u.ID); err != nil {
		return err
	}
	// The user left every conversation it was in; rather than list them,
	// start the cache over (accounts are rarely removed).
	s.rosters.clear()
	if s.cfg.Peers != nil {
		s.cfg.Peers.RosterChanged("")
	}
	return nil
}

// Me returns a user by id.
func (s *Service) Me(ctx context.Context, id string) (User, error) { return s.store.UserByID(ctx, id) }

// SearchUsers lists users whose username starts with prefix.
func (s *Service) SearchUsers(ctx context.Context, prefix string, limit int) ([]User, error) {
	if limit <= 0 || limit > MaxPageLimit {
		limit = DefaultPageLimit
	}
	if !storable(prefix) {
		return []User{}, nil // no username holds it
	}
	return s.store.SearchUsers(ctx, strings.TrimSpace(prefix), limit)
}
