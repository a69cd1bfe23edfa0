package storage

import (
	"context"
	"database/sql"
	"errors"
	"strings"

	"github.com/imserver/imserver/chat"
)

// CreateUser implements chat.UserStore.
func (db *DB) CreateUser(ctx context.Context, u chat.User, passwordHash string) error {
	return db.w.exec(ctx, func(t *wtx) error {
		_, err := t.ExecContext(t.ctx, `INSERT INTO users (id, username, display_name, password_hash, created_at) VALUES (?, ?, ?, ?, ?)`,
			u.ID, u.Username, u.DisplayName, passwordHash, nowMS())
		if isUnique(err) {
			return chat.Errorf(chat.EConflict, "username %q is taken", u.Username)
		}
		return err
	})
}

func scanUser(row *sql.Row) (chat.User, error) {
	var u chat.User
	err := row.Scan(&u.ID, &u.Username, &u.DisplayName)
	if errors.Is(err, sql.ErrNoRows) {
		return u, chat.Errorf(chat.ENotFound, "user not found")
	}
	return u, err
}

// UserByID implements chat.UserStore.
func (db *DB) UserByID(ctx context.Context, id string) (chat.User, error) {
	return scanUser(db.readers.QueryRowContext(ctx, `SELECT id, username, display_name FROM users WHERE id = ?`, id))
}

// UserByName implements chat.UserStore.
func (db *DB) UserByName(ctx context.Context, username string) (chat.User, string, error) {
	var u chat.User
	var hash string
	err := db.readers.QueryRowContext(ctx, `SELECT id, username, display_name, password_hash FROM users WHERE username = ?`, username).
		Scan(&u.ID, &u.Username, &u.DisplayName, &hash)
	if errors.Is(err, sql.ErrNoRows) {
		return u, "", chat.Errorf(chat.ENotFound, "user not found")
	}
	return u, hash, err
}

// SearchUsers implements chat.UserStore.
func (db *DB) SearchUsers(ctx context.Context, prefix string, limit int) ([]chat.User, error) {
	esc := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(prefix)
	rows, err := db.readers.QueryContext(ctx, `SELECT id, username, display_name FROM users
		WHERE username LIKE ? ESCAPE '\' ORDER BY username LIMIT ?`, esc+"%", limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	users := []chat.User{}
	for rows.Next() {
		var u chat.User
		if err := rows.Scan(&u.ID, &u.Username, &u.DisplayName); err != nil {
			return nil, err
		}
		users = append(users, u)
	}
	return users, rows.Err()
}

// SetPassword implements chat.UserStore.
func (db *DB) SetPassword(ctx context.Context, userID, passwordHash string) error {
	return db.w.exec(ctx, func(t *wtx) error {
		_, err := t.ExecContext(t.ctx, `UPDATE users SET password_hash = ? WHERE id = ?`, passwordHash, userID)
		return err
	})
}

// DeleteUser implements chat.UserStore.
func (db *DB) DeleteUser(ctx context.Context, userID string) error {
	return db.w.exec(ctx, func(t *wtx) error {
		rows, err := t.QueryContext(t.ctx, `SELECT conv_id FROM members WHERE user_id = ? AND max_seq IS NULL`, userID)
		if err != nil {
			return err
		}
		var convs []string
		for rows.Next() {
			var c string
			if err := rows.Scan(&c); err != nil {
				rows.Close()
				return err
			}
			convs = append(convs, c)
		}
		rows.Close()
		for _, c := range convs {
			if err := removeMember(t, c, userID); err != nil {
				return err
			}
		}
		if _, err := t.ExecContext(t.ctx, `DELETE FROM tokens WHERE user_id = ?`, userID); err != nil {
			return err
		}
		_, err = t.ExecContext(t.ctx, `DELETE FROM users WHERE id = ?`, userID)
		return err
	})
}

// CreateToken implements chat.UserStore.
func (db *DB) CreateToken(ctx context.Context, userID string, tokenHash []byte, sess chat.Session) error {
	return db.w.exec(ctx, func(t *wtx) error {
		_, err := t.ExecContext(t.ctx, `INSERT INTO tokens (hash, user_id, created_at, session_id, last_used_at, user_agent, address)
			VALUES (?, ?, ?, ?, ?, ?, ?)`, tokenHash, userID, sess.CreatedAt, sess.ID, sess.LastUsedAt, sess.UserAgent, sess.Address)
		return err
	})
}

// UserByToken implements chat.UserStore.
func (db *DB) UserByToken(ctx context.Context, tokenHash []byte) (chat.User, error) {
	return scanUser(db.readers.QueryRowContext(ctx, `SELECT u.id, u.username, u.display_name
		FROM tokens t JOIN users u ON u.id = t.user_id WHERE t.hash = ?`, tokenHash))
}

// DeleteToken implements chat.UserStore.
func (db *DB) DeleteToken(ctx context.Context, tokenHash []byte) error {
	return db.w.exec(ctx, func(t *wtx) error {
		_, err := t.ExecContext(t.ctx, `DELETE FROM tokens WHERE hash = ?`, tokenHash)
		return err
	})
}

// DeleteUserTokens implements chat.UserStore.
func (db *DB) DeleteUserTokens(ctx context.Context, userID string) error {
	return db.w.exec(ctx, func(t *wtx) error {
		_, err := t.ExecContext(t.ctx, `DELETE FROM tokens WHERE user_id = ?`, userID)
		return err
	})
}
