package storage

import (
	"context"

	"github.com/imserver/imserver/chat"
)

// Bounds on what one user keeps: invites expired this long ago are
// forgotten when the user makes a new one, and a user holds at most
// maxOpenInvites unexpired invites.
const (
	inviteKeepExpired = 30 * 24 * 60 * 60 * 1000
	maxOpenInvites    = 100
)

// CreateInvite implements chat.InviteStore.
func (db *DB) CreateInvite(ctx context.Context, inv chat.Invite, codeHash []byte) error {
	return db.w.exec(ctx, func(t *wtx) error {
		if _, err := t.ExecContext(t.ctx, `DELETE FROM invites WHERE created_by = ? AND expires_at < ?`, inv.CreatedBy, inv.CreatedAt-inviteKeepExpired); err != nil {
			return err
		}
		var open int
		if err := t.QueryRowContext(t.ctx, `SELECT COUNT(*) FROM invites WHERE created_by = ? AND expires_at > ?`, inv.CreatedBy, inv.CreatedAt).Scan(&open); err != nil {
			return err
		}
		if open >= maxOpenInvites {
			return chat.Errorf(chat.EConflict, "you have %d open invites; revoke some first", open)
		}
		_, err := t.ExecContext(t.ctx, `INSERT INTO invites (id, code_hash, created_by, created_at, expires_at, max_uses)
			VALUES (?, ?, ?, ?, ?, ?)`, inv.ID, codeHash, inv.CreatedBy, inv.CreatedAt, inv.ExpiresAt, inv.MaxUses)
		return err
	})
}

// Invites implements chat.InviteStore.
func (db *DB) Invites(ctx context.Context, creator string) ([]chat.Invite, error) {
	rows, err := db.readers.QueryContext(ctx, `SELECT id, created_by, created_at, expires_at, max_uses, uses
		FROM invites WHERE ?1 = '' OR created_by = ?1 ORDER BY created_at DESC, id`, creator)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []chat.Invite{}
	for rows.Next() {
		var inv chat.Invite
		if err := rows.Scan(&inv.ID, &inv.CreatedBy, &inv.CreatedAt, &inv.ExpiresAt, &inv.MaxUses, &inv.Uses); err != nil {
			return nil, err
		}
		out = append(out, inv)
	}
	return out, rows.Err()
}

// DeleteInvite implements chat.InviteStore.
func (db *DB) DeleteInvite(ctx context.Context, id, creator string) error {
	return db.w.exec(ctx, func(t *wtx) error {
		res, err := t.ExecContext(t.ctx, `DELETE FROM invites WHERE id = ?1 AND (?2 = '' OR created_by = ?2)`, id, creator)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return chat.Errorf(chat.ENotFound, "invite not found")
		}
		return nil
	})
}

// CreateInvitedUser implements chat.InviteStore. The UPDATE is the whole
// check: it takes a use only while the invite is unexpired and has uses
// left, so of two registrations racing for the last use exactly one
// changes a row. A taken username rolls the use back with the rest of the
// job (the writer runs each job in a savepoint).
func (db *DB) CreateInvitedUser(ctx context.Context, u chat.User, passwordHash string, codeHash []byte, now int64) error {
	return db.w.exec(ctx, func(t *wtx) error {
		var creator string
		err := t.QueryRowContext(t.ctx, `UPDATE invites SET uses = uses + 1
			WHERE code_hash = ? AND expires_at > ? AND (max_uses = 0 OR uses < max_uses) RETURNING created_by`, codeHash, now).Scan(&creator)
		if isNoRows(err) {
			return chat.ErrBadInvite
		} else if err != nil {
			return err
		}
		_, err = t.ExecContext(t.ctx, `INSERT INTO users (id, username, display_name, password_hash, created_at, invited_by) VALUES (?, ?, ?, ?, ?, ?)`,
			u.ID, u.Username, u.DisplayName, passwordHash, now, creator)
		if isUnique(err) {
			return chat.Errorf(chat.EConflict, "username %q is taken", u.Username)
		}
		return err
	})
}
