package postgres

import (
	"context"
	"errors"
	"strings"

	"github.com/imserver/imserver/chat"
	"github.com/jackc/pgx/v5"
)

// CreateUser implements chat.UserStore.
func (db *DB) CreateUser(ctx context.Context, u chat.User, passwordHash string) error {
	return wrap(db.w.exec(ctx, func(t *wtx) error {
		_, err := t.Exec(`INSERT INTO users (id, username, display_name, password_hash, created_at) VALUES ($1, $2, $3, $4, $5)`,
			u.ID, u.Username, u.DisplayName, passwordHash, nowMS())
		if isUnique(err) {
			return chat.Errorf(chat.EConflict, "username %q is taken", u.Username)
		}
		return err
	}))
}

func scanUser(row pgx.Row) (chat.User, error) {
	var u chat.User
	err := row.Scan(&u.ID, &u.Username, &u.DisplayName)
	if errors.Is(err, pgx.ErrNoRows) {
		return u, chat.Errorf(chat.ENotFound, "user not found")
	}
	return u, wrap(err)
}

// UserByID implements chat.UserStore.
func (db *DB) UserByID(ctx context.Context, id string) (chat.User, error) {
	return scanUser(db.pool.QueryRow(ctx, `SELECT id, username, display_name FROM users WHERE id = $1`, id))
}

// UserByName implements chat.UserStore; usernames match regardless of case.
func (db *DB) UserByName(ctx context.Context, username string) (chat.User, string, error) {
	var u chat.User
	var hash string
	err := db.pool.QueryRow(ctx, `SELECT id, username, display_name, password_hash FROM users WHERE lower(username) = lower($1)`, username).
		Scan(&u.ID, &u.Username, &u.DisplayName, &hash)
	if errors.Is(err, pgx.ErrNoRows) {
		return u, "", chat.Errorf(chat.ENotFound, "user not found")
	}
	return u, hash, wrap(err)
}

// SearchUsers implements chat.UserStore: a case-insensitive prefix, as
// SQLite's LIKE, in byte order as SQLite sorts (COLLATE "C": a database
// made with another collation would sort punctuation differently).
func (db *DB) SearchUsers(ctx context.Context, prefix string, limit int) ([]chat.User, error) {
	esc := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(strings.ToLower(prefix))
	rows, err := db.pool.Query(ctx, `SELECT id, username, display_name FROM users
		WHERE lower(username) LIKE $1 ESCAPE '\' ORDER BY lower(username) COLLATE "C", username COLLATE "C" LIMIT $2`, esc+"%", limit)
	if err != nil {
		return nil, wrap(err)
	}
	defer rows.Close()
	users := []chat.User{}
	for rows.Next() {
		var u chat.User
		if err := rows.Scan(&u.ID, &u.Username, &u.DisplayName); err != nil {
			return nil, wrap(err)
		}
		users = append(users, u)
	}
	return users, wrap(rows.Err())
}

// SetPassword implements chat.UserStore.
func (db *DB) SetPassword(ctx context.Context, userID, passwordHash string) error {
	return wrap(db.w.exec(ctx, func(t *wtx) error {
		_, err := t.Exec(`UPDATE users SET password_hash = $1 WHERE id = $2`, passwordHash, userID)
		return err
	}))
}

// DeleteUser implements chat.UserStore.
func (db *DB) DeleteUser(ctx context.Context, userID string) error {
	return wrap(db.w.exec(ctx, func(t *wtx) error {
		rows, err := t.Query(`SELECT conv_id FROM members WHERE user_id = $1 AND max_seq IS NULL`, userID)
		if err != nil {
			return err
		}
		convs, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, c := range convs {
			if err := removeMember(t, c, userID); err != nil {
				return err
			}
		}
		if _, err := t.Exec(`DELETE FROM tokens WHERE user_id = $1`, userID); err != nil {
			return err
		}
		_, err = t.Exec(`DELETE FROM users WHERE id = $1`, userID)
		return err
	}))
}

// UserByToken implements chat.UserStore.
func (db *DB) UserByToken(ctx context.Context, tokenHash []byte) (chat.User, error) {
	return scanUser(db.pool.QueryRow(ctx, `SELECT u.id, u.username, u.display_name
		FROM tokens t JOIN users u ON u.id = t.user_id WHERE t.hash = $1`, tokenHash))
}

// DeleteToken implements chat.UserStore.
func (db *DB) DeleteToken(ctx context.Context, tokenHash []byte) error {
	return wrap(db.w.exec(ctx, func(t *wtx) error {
		_, err := t.Exec(`DELETE FROM tokens WHERE hash = $1`, tokenHash)
		return err
	}))
}

// DeleteUserTokens implements chat.UserStore.
func (db *DB) DeleteUserTokens(ctx context.Context, userID string) error {
	return wrap(db.w.exec(ctx, func(t *wtx) error {
		_, err := t.Exec(`DELETE FROM tokens WHERE user_id = $1`, userID)
		return err
	}))
}
