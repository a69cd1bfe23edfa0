package storage

import (
	"context"
	"database/sql"
	"errors"

	"github.com/imserver/imserver/chat"
)

func isNoRows(err error) bool { return errors.Is(err, sql.ErrNoRows) }

// Users implements chat.AdminStore.
func (db *DB) Users(ctx context.Context) ([]chat.UserInfo, error) {
	rows, err := db.readers.QueryContext(ctx, `SELECT id, username, display_name, created_at, disabled_at FROM users ORDER BY username`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []chat.UserInfo{}
	for rows.Next() {
		var u chat.UserInfo
		if err := rows.Scan(&u.ID, &u.Username, &u.DisplayName, &u.CreatedAt, &u.DisabledAt); err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, rows.Err()
}

// UserDisabled implements chat.AdminStore.
func (db *DB) UserDisabled(ctx context.Context, userID string) (bool, error) {
	var at int64
	err := db.readers.QueryRowContext(ctx, `SELECT disabled_at FROM users WHERE id = ?`, userID).Scan(&at)
	if isNoRows(err) {
		return false, chat.Errorf(chat.ENotFound, "user not found")
	}
	return at > 0, err
}

// SetDisabled implements chat.AdminStore.
func (db *DB) SetDisabled(ctx context.Context, userID string, at int64) ([][]byte, error) {
	var hashes [][]byte
	err := db.w.exec(ctx, func(t *wtx) error {
		hashes = nil
		res, err := t.ExecContext(t.ctx, `UPDATE users SET disabled_at = ? WHERE id = ?`, at, userID)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return chat.Errorf(chat.ENotFound, "user not found")
		}
		if at == 0 {
			return nil
		}
		hashes, err = deleteTokens(t, userID)
		return err
	})
	return hashes, err
}

// RevokeUserTokens implements chat.AdminStore.
func (db *DB) RevokeUserTokens(ctx context.Context, userID string) ([][]byte, error) {
	var hashes [][]byte
	err := db.w.exec(ctx, func(t *wtx) error {
		var err error
		hashes, err = deleteTokens(t, userID)
		return err
	})
	return hashes, err
}

func deleteTokens(t *wtx, userID string) ([][]byte, error) {
	rows, err := t.QueryContext(t.ctx, `DELETE FROM tokens WHERE user_id = ? RETURNING hash`, userID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var hashes [][]byte
	for rows.Next() {
		var h []byte
		if err := rows.Scan(&h); err != nil {
			return nil, err
		}
		hashes = append(hashes, h)
	}
	return hashes, rows.Err()
}
