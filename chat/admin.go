package chat

import (
	"context"
)

// UserInfo is a user as the admin page lists it.
type UserInfo struct {
	User
	CreatedAt int64 `json:"created_at"`
	// DisabledAt is when an admin disabled the account; 0 when enabled.
	DisabledAt int64 `json:"disabled_at"`
	Disabled   bool  `json:"disabled"`
	Admin      bool  `json:"admin"`
}

// AdminStore is what the admin page needs beyond UserStore.
type AdminStore interface {
	// Users lists every account by username.
	Users(ctx context.Context) ([]UserInfo, error)
	// SetDisabled disables (at > 0) or enables (at == 0) an account.
	// Disabling deletes its tokens in the same transaction and returns
	// their hashes, so the caller can close their sockets as logout does.
	SetDisabled(ctx context.Context, userID string, at int64) ([][]byte, error)
	UserDisabled(ctx context.Context, userID string) (bool, error)
	// RevokeUserTokens deletes the user's tokens and returns their hashes.
	RevokeUserTokens(ctx context.Context, userID string) ([][]byte, error)
}

// ErrDisabled answers a disabled account's correct password: 401 as any
// refused login (PROTOCOL.md: "401 otherwise"), saying why.
var ErrDisabled = &Error{Code: EUnauthorized, Message: "this account is disabled"}

func (s *Service) admin(me User) error {
	if !s.IsAdmin(me) {
		return Errorf(EForbidden, "admins only")
	}
	return nil
}

// AdminUsers lists every account; admins only.
func (s *Service) AdminUsers(ctx context.Context, me User) ([]UserInfo, error) {
	if err := s.admin(me); err != nil {
		return nil, err
	}
	return s.Accounts(ctx)
}

// Accounts lists every account, for the operator (`imserver user list`):
// whoever runs the binary on the database is past every check.
func (s *Service) Accounts(ctx context.Context) ([]UserInfo, error) {
	users, err := s.store.Users(ctx)
	for i := range users {
		users[i].Disabled = users[i].DisabledAt > 0
		users[i].Admin = s.IsAdmin(users[i].User)
	}
	return users, err
}

// SetDisabled disables or enables an account; admins only, and not their
// own. It returns the hashes of the tokens that stopped working.
func (s *Service) SetDisabled(ctx context.Context, me User, userID string, disabled bool, now int64) ([][]byte, error) {
	if err := s.admin(me); err != nil {
		return nil, err
	}
	if userID == me.ID {
		return nil, Errorf(EBadRequest, "you cannot disable yourself")
	}
	if _, err := s.store.UserByID(ctx, userID); err != nil {
		return nil, err
	}
	at := int64(0)
	if disabled {
		at = max(now, 1)
	}
	return s.store.SetDisabled(ctx, userID, at)
}

// ResetPassword sets a user's password (admins only) and ends its
// sessions; it returns the hashes of the tokens that stopped working.
func (s *Service) ResetPassword(ctx context.Context, me User, userID, password string) ([][]byte, error) {
	if err := s.admin(me); err != nil {
		return nil, err
	}
	u, err := s.store.UserByID(ctx, userID)
	if err != nil {
		return nil, err
	}
	if err := checkPasswordRules(password); err != nil {
		return nil, err
	}
	hash, err := s.hash(ctx, password)
	if err != nil {
		return nil, err
	}
	if err := s.store.SetPassword(ctx, u.ID, hash); err != nil {
		return nil, err
	}
	return s.store.RevokeUserTokens(ctx, u.ID)
}
