package postgres

import (
	"context"
	"errors"

	"github.com/imserver/imserver/chat"
	"github.com/jackc/pgx/v5"
)

// Invites, disabled accounts, mutes, Web Push subscriptions and settings:
// the SQL of storage/invites.go, storage/admin.go and
// storage/reach_notify.go in PostgreSQL's dialect.

// Bounds on what one user keeps, as in storage/invites.go.
const (
	inviteKeepExpired    = 30 * 24 * 60 * 60 * 1000
	maxOpenInvites       = 100
	maxPushSubscriptions = 20
)

// CreateInvite implements chat.InviteStore.
func (db *DB) CreateInvite(ctx context.Context, inv chat.Invite, codeHash []byte) error {
	return wrap(db.w.exec(ctx, func(t *wtx) error {
		if _, err := t.Exec(`DELETE FROM invites WHERE created_by = $1 AND expires_at < $2`, inv.CreatedBy, inv.CreatedAt-inviteKeepExpired); err != nil {
			return err
		}
		var open int
		if err := t.QueryRow(`SELECT COUNT(*) FROM invites WHERE created_by = $1 AND expires_at > $2`, inv.CreatedBy, inv.CreatedAt).Scan(&open); err != nil {
			return err
		}
		if open >= maxOpenInvites {
			return chat.Errorf(chat.EConflict, "you have %d open invites; revoke some first", open)
		}
		_, err := t.Exec(`INSERT INTO invites (id, code_hash, created_by, created_at, expires_at, max_uses)
			VALUES ($1, $2, $3, $4, $5, $6)`, inv.ID, codeHash, inv.CreatedBy, inv.CreatedAt, inv.ExpiresAt, inv.MaxUses)
		return err
	}))
}

// Invites implements chat.InviteStore.
func (db *DB) Invites(ctx context.Context, creator string) ([]chat.Invite, error) {
	rows, err := db.pool.Query(ctx, `SELECT id, created_by, created_at, expires_at, max_uses, uses
		FROM invites WHERE $1 = '' OR created_by = $1 ORDER BY created_at DESC, id`, creator)
	if err != nil {
		return nil, wrap(err)
	}
	defer rows.Close()
	out := []chat.Invite{}
	for rows.Next() {
		var inv chat.Invite
		if err := rows.Scan(&inv.ID, &inv.CreatedBy, &inv.CreatedAt, &inv.ExpiresAt, &inv.MaxUses, &inv.Uses); err != nil {
			return nil, wrap(err)
		}
		out = append(out, inv)
	}
	return out, wrap(rows.Err())
}

// DeleteInvite implements chat.InviteStore.
func (db *DB) DeleteInvite(ctx context.Context, id, creator string) error {
	return wrap(db.w.exec(ctx, func(t *wtx) error {
		tag, err := t.Exec(`DELETE FROM invites WHERE id = $1 AND ($2 = '' OR created_by = $2)`, id, creator)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return chat.Errorf(chat.ENotFound, "invite not found")
		}
		return nil
	}))
}

// CreateInvitedUser implements chat.InviteStore. The UPDATE is the whole
// check: it takes a use only while the invite is unexpired and has uses
// left (the row lock makes racing registrations wait and re-check), so of
// two registrations racing for the last use exactly one changes a row. A
// taken username rolls the use back with the job's savepoint.
func (db *DB) CreateInvitedUser(ctx context.Context, u chat.User, passwordHash string, codeHash []byte, now int64) error {
	return wrap(db.w.exec(ctx, func(t *wtx) error {
		var creator string
		err := t.QueryRow(`UPDATE invites SET uses = uses + 1
			WHERE code_hash = $1 AND expires_at > $2 AND (max_uses = 0 OR uses < max_uses) RETURNING created_by`, codeHash, now).Scan(&creator)
		if errors.Is(err, pgx.ErrNoRows) {
			return chat.ErrBadInvite
		} else if err != nil {
			return err
		}
		_, err = t.Exec(`INSERT INTO users (id, username, display_name, password_hash, created_at, invited_by) VALUES ($1, $2, $3, $4, $5, $6)`,
			u.ID, u.Username, u.DisplayName, passwordHash, now, creator)
		if isUnique(err) {
			return chat.Errorf(chat.EConflict, "username %q is taken", u.Username)
		}
		return err
	}))
}

// Users implements chat.AdminStore.
func (db *DB) Users(ctx context.Context) ([]chat.UserInfo, error) {
	rows, err := db.pool.Query(ctx, `SELECT id, username, display_name, created_at, disabled_at FROM users ORDER BY username`)
	if err != nil {
		return nil, wrap(err)
	}
	defer rows.Close()
	out := []chat.UserInfo{}
	for rows.Next() {
		var u chat.UserInfo
		if err := rows.Scan(&u.ID, &u.Username, &u.DisplayName, &u.CreatedAt, &u.DisabledAt); err != nil {
			return nil, wrap(err)
		}
		out = append(out, u)
	}
	return out, wrap(rows.Err())
}

// UserDisabled implements chat.AdminStore.
func (db *DB) UserDisabled(ctx context.Context, userID string) (bool, error) {
	var at int64
	err := db.pool.QueryRow(ctx, `SELECT disabled_at FROM users WHERE id = $1`, userID).Scan(&at)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, chat.Errorf(chat.ENotFound, "user not found")
	}
	return at > 0, wrap(err)
}

// SetDisabled implements chat.AdminStore: disabling deletes the account's
// tokens in the same transaction and returns their hashes.
func (db *DB) SetDisabled(ctx context.Context, userID string, at int64) ([][]byte, error) {
	var hashes [][]byte
	err := db.w.exec(ctx, func(t *wtx) error {
		hashes = nil
		tag, err := t.Exec(`UPDATE users SET disabled_at = $1 WHERE id = $2`, at, userID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return chat.Errorf(chat.ENotFound, "user not found")
		}
		if at == 0 {
			return nil
		}
		hashes, err = deleteOtherTokens(t, userID, nil)
		return err
	})
	return hashes, wrap(err)
}

// RevokeUserTokens implements chat.AdminStore.
func (db *DB) RevokeUserTokens(ctx context.Context, userID string) ([][]byte, error) {
	var hashes [][]byte
	err := db.w.exec(ctx, func(t *wtx) error {
		var err error
		hashes, err = deleteOtherTokens(t, userID, nil)
		return err
	})
	return hashes, wrap(err)
}

// SetMute implements chat.NotifyStore. The member row's version moves so
// that the user's other devices sync the mute.
func (db *DB) SetMute(ctx context.Context, conv, user string, until int64) error {
	var missing bool
	err := db.w.exec(ctx, func(t *wtx) error {
		missing = false
		v, err := t.nextVersion()
		if err != nil {
			return err
		}
		tag, err := t.Exec(`UPDATE members SET muted_until = $1, version = $2 WHERE conv_id = $3 AND user_id = $4`, until, v, conv, user)
		if err != nil {
			return err
		}
		missing = tag.RowsAffected() == 0
		return nil
	})
	if err != nil {
		return wrap(err)
	}
	if missing {
		return db.missingMember(ctx, conv)
	}
	return nil
}

// AddPushSubscription implements chat.NotifyStore.
func (db *DB) AddPushSubscription(ctx context.Context, sub chat.PushSubscription) error {
	return wrap(db.w.exec(ctx, func(t *wtx) error {
		_, err := t.Exec(`INSERT INTO push_subscriptions (endpoint, user_id, p256dh, auth, created_at) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (endpoint) DO UPDATE SET user_id = excluded.user_id, p256dh = excluded.p256dh, auth = excluded.auth, created_at = excluded.created_at`,
			sub.Endpoint, sub.UserID, sub.P256dh, sub.Auth, sub.CreatedAt)
		if err != nil {
			return err
		}
		// A user's browsers come and go; keep the newest few, so that a
		// client subscribing in a loop cannot grow the table.
		_, err = t.Exec(`DELETE FROM push_subscriptions WHERE user_id = $1 AND endpoint NOT IN
			(SELECT endpoint FROM push_subscriptions WHERE user_id = $1 ORDER BY created_at DESC, endpoint LIMIT $2)`, sub.UserID, maxPushSubscriptions)
		return err
	}))
}

// DeletePushSubscription implements chat.NotifyStore.
func (db *DB) DeletePushSubscription(ctx context.Context, user, endpoint string) error {
	return wrap(db.w.exec(ctx, func(t *wtx) error {
		_, err := t.Exec(`DELETE FROM push_subscriptions WHERE endpoint = $1 AND ($2 = '' OR user_id = $2)`, endpoint, user)
		return err
	}))
}

// PushSubscriptions implements chat.NotifyStore.
func (db *DB) PushSubscriptions(ctx context.Context, user string) ([]chat.PushSubscription, error) {
	rows, err := db.pool.Query(ctx, `SELECT endpoint, user_id, p256dh, auth, created_at FROM push_subscriptions WHERE user_id = $1 ORDER BY created_at`, user)
	if err != nil {
		return nil, wrap(err)
	}
	defer rows.Close()
	var out []chat.PushSubscription
	for rows.Next() {
		var s chat.PushSubscription
		if err := rows.Scan(&s.Endpoint, &s.UserID, &s.P256dh, &s.Auth, &s.CreatedAt); err != nil {
			return nil, wrap(err)
		}
		out = append(out, s)
	}
	return out, wrap(rows.Err())
}

// InitSetting implements chat.NotifyStore: the first value stored under
// name wins, also between nodes starting at once.
func (db *DB) InitSetting(ctx context.Context, name string, value []byte) ([]byte, error) {
	var stored []byte
	err := db.w.exec(ctx, func(t *wtx) error {
		if _, err := t.Exec(`INSERT INTO settings (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING`, name, value); err != nil {
			return err
		}
		return t.QueryRow(`SELECT value FROM settings WHERE name = $1`, name).Scan(&stored)
	})
	return stored, wrap(err)
}
