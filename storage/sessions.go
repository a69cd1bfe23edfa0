package storage

import (
	"context"
	"database/sql"
	"errors"

	"github.com/imserver/imserver/chat"
)

const sessionColumns = `t.session_id, t.created_at, t.last_used_at, t.user_agent, t.address, t.hash`

func sessionDest(sess *chat.Session) []any {
	return []any{&sess.ID, &sess.CreatedAt, &sess.LastUsedAt, &sess.UserAgent, &sess.Address, &sess.TokenHash}
}

// SessionByToken implements chat.UserStore.
func (db *DB) SessionByToken(ctx context.Context, tokenHash []byte) (chat.User, chat.Session, error) {
	var u chat.User
	var sess chat.Session
	row := db.readers.QueryRowContext(ctx, `SELECT u.id, u.username, u.display_name, `+sessionColumns+`
		FROM tokens t JOIN users u ON u.id = t.user_id WHERE t.hash = ?`, tokenHash)
	err := row.Scan(append([]any{&u.ID, &u.Username, &u.DisplayName}, sessionDest(&sess)...)...)
	if errors.Is(err, sql.ErrNoRows) {
		return u, sess, chat.Errorf(chat.ENotFound, "token not found")
	}
	return u, sess, err
}

// Sessions implements chat.UserStore.
func (db *DB) Sessions(ctx context.Context, userID string) ([]chat.Session, error) {
	rows, err := db.readers.QueryContext(ctx, `SELECT `+sessionColumns+` FROM tokens t
		WHERE t.user_id = ? ORDER BY t.last_used_at DESC, t.created_at DESC`, userID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	list := []chat.Session{}
	for rows.Next() {
		var sess chat.Session
		if err := rows.Scan(sessionDest(&sess)...); err != nil {
			return nil, err
		}
		list = append(list, sess)
	}
	return list, rows.Err()
}

// DeleteSession implements chat.UserStore.
func (db *DB) DeleteSession(ctx context.Context, userID, id string) ([]byte, error) {
	var hash []byte
	err := db.w.exec(ctx, func(t *wtx) error {
		err := t.QueryRowContext(t.ctx, `DELETE FROM tokens WHERE user_id = ? AND session_id = ? RETURNING hash`, userID, id).Scan(&hash)
		if errors.Is(err, sql.ErrNoRows) {
			return chat.Errorf(chat.ENotFound, "session not found")
		}
		return err
	})
	return hash, err
}

// DeleteOtherSessions implements chat.UserStore.
func (db *DB) DeleteOtherSessions(ctx context.Context, userID string, keep []byte) ([][]byte, error) {
	var hashes [][]byte
	err := db.w.exec(ctx, func(t *wtx) error {
		var err error
		hashes, err = deleteOtherTokens(t, userID, keep)
		return err
	})
	return hashes, err
}

func deleteOtherTokens(t *wtx, userID string, keep []byte) ([][]byte, error) {
	rows, err := t.QueryContext(t.ctx, `DELETE FROM tokens WHERE user_id = ? AND hash <> ? RETURNING hash`, userID, keep)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	hashes := [][]byte{}
	for rows.Next() {
		var h []byte
		if err := rows.Scan(&h); err != nil {
			return nil, err
		}
		hashes = append(hashes, h)
	}
	return hashes, rows.Close()
}

// ChangePassword implements chat.UserStore.
func (db *DB) ChangePassword(ctx context.Context, userID, passwordHash string, keep []byte) ([][]byte, error) {
	var hashes [][]byte
	err := db.w.exec(ctx, func(t *wtx) error {
		if _, err := t.ExecContext(t.ctx, `UPDATE users SET password_hash = ? WHERE id = ?`, passwordHash, userID); err != nil {
			return err
		}
		var err error
		hashes, err = deleteOtherTokens(t, userID, keep)
		return err
	})
	return hashes, err
}

// TouchSessions implements chat.UserStore.
func (db *DB) TouchSessions(ctx context.Context, uses []chat.SessionUse) error {
	return db.w.exec(ctx, func(t *wtx) error {
		st, err := t.stmt(`UPDATE tokens SET last_used_at = max(last_used_at, ?),
			user_agent = CASE WHEN ? = '' THEN user_agent ELSE ? END,
			address = CASE WHEN ? = '' THEN address ELSE ? END WHERE hash = ?`)
		if err != nil {
			return err
		}
		for _, u := range uses {
			if _, err := st.ExecContext(t.ctx, u.LastUsedAt, u.UserAgent, u.UserAgent, u.Address, u.Address, u.TokenHash); err != nil {
				return err
			}
		}
		return nil
	})
}

// CreateTicket implements chat.UserStore. Expired tickets are swept in
// the same transaction: tickets are asked for at each socket (re)connect,
// so the table stays as small as the last 30 seconds' connects.
func (db *DB) CreateTicket(ctx context.Context, hash []byte, userID string, tokenHash []byte, expiresAt int64) error {
	return db.w.exec(ctx, func(t *wtx) error {
		if _, err := t.ExecContext(t.ctx, `DELETE FROM tickets WHERE expires_at <= ?`, nowMS()); err != nil {
			return err
		}
		_, err := t.ExecContext(t.ctx, `INSERT INTO tickets (hash, user_id, token_hash, expires_at) VALUES (?, ?, ?, ?)`,
			hash, userID, tokenHash, expiresAt)
		return err
	})
}

// UseTicket implements chat.UserStore. The one conditional UPDATE is what
// makes a ticket single-use, also between processes sharing the file.
func (db *DB) UseTicket(ctx context.Context, hash []byte, now int64) ([]byte, error) {
	var tokenHash []byte
	err := db.w.exec(ctx, func(t *wtx) error {
		err := t.QueryRowContext(t.ctx, `UPDATE tickets SET used = 1 WHERE hash = ? AND used = 0 AND expires_at > ? RETURNING token_hash`,
			hash, now).Scan(&tokenHash)
		if errors.Is(err, sql.ErrNoRows) {
			return chat.Errorf(chat.ENotFound, "ticket not found")
		}
		return err
	})
	return tokenHash, err
}

// TicketToken implements chat.UserStore.
func (db *DB) TicketToken(ctx context.Context, hash []byte, now int64) ([]byte, error) {
	var tokenHash []byte
	err := db.readers.QueryRowContext(ctx, `SELECT token_hash FROM tickets WHERE hash = ? AND used = 0 AND expires_at > ?`, hash, now).Scan(&tokenHash)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, chat.Errorf(chat.ENotFound, "ticket not found")
	}
	return tokenHash, err
}

// DeleteExpiredSessions implements chat.UserStore.
func (db *DB) DeleteExpiredSessions(ctx context.Context, usedBefore, createdBefore int64) error {
	return db.w.exec(ctx, func(t *wtx) error {
		_, err := t.ExecContext(t.ctx, `DELETE FROM tokens WHERE last_used_at < ? OR created_at < ?`, usedBefore, createdBefore)
		return err
	})
}
