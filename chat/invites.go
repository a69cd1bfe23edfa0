package chat

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"time"
)

// Registration modes (config auth.registration).
const (
	RegisterOpen   = "open"
	RegisterInvite = "invite"
	RegisterClosed = "closed"
)

// Invite limits.
const (
	inviteCodeBytes     = 18 // 144 random bits: nothing to guess
	DefaultInviteExpiry = 7 * 24 * time.Hour
	maxInviteExpiry     = 365 * 24 * time.Hour
	maxInviteUses       = 10_000
	inviteIDHexLen      = 16
)

// Invite is a link that lets people register. Only a hash of the code is
// stored, like tokens: the code (and its URL) is shown once, when the
// invite is made; lists show the id, which opens nothing.
type Invite struct {
	ID        string `json:"id"`
	Code      string `json:"code,omitempty"`
	URL       string `json:"url,omitempty"`
	CreatedBy string `json:"created_by"`
	CreatedAt int64  `json:"created_at"`
	ExpiresAt int64  `json:"expires_at"`
	// MaxUses is 0 for no limit.
	MaxUses int `json:"max_uses"`
	Uses    int `json:"uses"`
	// UsesLeft is null when the invite has no use limit.
	UsesLeft *int `json:"uses_left"`
}

func (inv *Invite) fill() {
	if inv.MaxUses > 0 {
		n := max(0, inv.MaxUses-inv.Uses)
		inv.UsesLeft = &n
	} else {
		inv.UsesLeft = nil
	}
}

// InviteStore keeps invites.
type InviteStore interface {
	CreateInvite(ctx context.Context, inv Invite, codeHash []byte) error
	// Invites lists the invites made by creator, or every invite when
	// creator is "", newest first; used up and expired ones too.
	Invites(ctx context.Context, creator string) ([]Invite, error)
	// DeleteInvite removes invite id; when creator is not "" only if it
	// made it. ENotFound otherwise.
	DeleteInvite(ctx context.Context, id, creator string) error
	// CreateInvitedUser takes one use of the invite with codeHash and
	// creates the user in the same transaction, with one conditional
	// UPDATE so that two registrations racing for the last use cannot both
	// win. EForbidden when the invite is unknown, expired or used up
	// (nothing is created); EConflict when the name is taken (no use is
	// taken).
	CreateInvitedUser(ctx context.Context, u User, passwordHash string, codeHash []byte, now int64) error
}

// InviteRequest is what POST /api/v1/invites takes.
type InviteRequest struct {
	MaxUses     int   `json:"max_uses"`
	ExpiresInMS int64 `json:"expires_in_ms"`
}

// inviteHash is what the store keeps of a code.
func inviteHash(code string) []byte {
	h := sha256.Sum256([]byte(code))
	return h[:]
}

// InviteID is the public id of the invite with this code.
func InviteID(code string) string { return hex.EncodeToString(inviteHash(code))[:inviteIDHexLen] }

// Registration returns the registration mode in force.
func (s *Service) Registration() string { return s.cfg.Registration }

// MayInvite reports whether u may make invites: admins (whatever the
// mode: PROTOCOL.md names no exception), and in invite mode everyone.
func (s *Service) MayInvite(u User) bool {
	return s.cfg.Registration == RegisterInvite || s.IsAdmin(u)
}

// CLIInviter is the creator of the invites `imserver invite create` makes.
const CLIInviter = "cli"

// adminInvite reports whether the invite with code was made by an admin or
// the command line: in closed mode no other invite opens registration
// (one made by a member while the mode was invite, say).
func (s *Service) adminInvite(ctx context.Context, code string) (bool, error) {
	all, err := s.store.Invites(ctx, "")
	if err != nil {
		return false, err
	}
	id := InviteID(code)
	for _, inv := range all {
		if inv.ID != id {
			continue
		}
		if inv.CreatedBy == CLIInviter {
			return true, nil
		}
		u, err := s.store.UserByID(ctx, inv.CreatedBy)
		if ErrorCode(err) == ENotFound {
			return false, nil
		}
		return err == nil && s.IsAdmin(u), err
	}
	return false, nil
}

// CreateInvite makes an invite by me (a zero User with an ID is how the
// command line makes one for the first admin: it bypasses MayInvite).
func (s *Service) CreateInvite(ctx context.Context, me User, req InviteRequest, cli bool) (Invite, error) {
	if !cli && !s.MayInvite(me) {
		return Invite{}, Errorf(EForbidden, "only admins may invite")
	}
	if req.MaxUses < 0 || req.MaxUses > maxInviteUses {
		return Invite{}, Errorf(EBadRequest, "max_uses must be 0 (no limit) to %d", maxInviteUses)
	}
	// Compared in milliseconds: as a Duration, a large value wraps
	// around (nanoseconds overflow int64) and would pass.
	if req.ExpiresInMS < 0 || req.ExpiresInMS > maxInviteExpiry.Milliseconds() {
		return Invite{}, Errorf(EBadRequest, "expires_in_ms must be 0 (the default, %d days) to %d", int(DefaultInviteExpiry.Hours()/24), maxInviteExpiry.Milliseconds())
	}
	exp := time.Duration(req.ExpiresInMS) * time.Millisecond
	if exp == 0 {
		exp = DefaultInviteExpiry
	}
	b := make([]byte, inviteCodeBytes)
	if _, err := rand.Read(b); err != nil {
		return Invite{}, err
	}
	code := base64.RawURLEncoding.EncodeToString(b)
	now := time.Now()
	inv := Invite{ID: InviteID(code), Code: code, CreatedBy: me.ID, CreatedAt: now.UnixMilli(),
		ExpiresAt: now.Add(exp).UnixMilli(), MaxUses: req.MaxUses}
	if err := s.store.CreateInvite(ctx, inv, inviteHash(code)); err != nil {
		return Invite{}, err
	}
	inv.fill()
	return inv, nil
}

// Invites lists my invites; all for an admin asking for all.
func (s *Service) Invites(ctx context.Context, me User, all bool) ([]Invite, error) {
	creator := me.ID
	if all {
		if !s.IsAdmin(me) {
			return nil, Errorf(EForbidden, "admins only")
		}
		creator = ""
	}
	list, err := s.store.Invites(ctx, creator)
	for i := range list {
		list[i].fill()
	}
	return list, err
}

// RevokeInvite deletes an invite named by its code or its id: its maker's,
// or any for an admin.
func (s *Service) RevokeInvite(ctx context.Context, me User, codeOrID string) error {
	id := codeOrID
	if !isInviteID(id) {
		id = InviteID(codeOrID)
	}
	creator := me.ID
	if s.IsAdmin(me) {
		creator = ""
	}
	return s.store.DeleteInvite(ctx, id, creator)
}

func isInviteID(s string) bool {
	if len(s) != inviteIDHexLen {
		return false
	}
	return strings.Trim(s, "0123456789abcdef") == ""
}
