package postgres

import (
	"context"
	"errors"

	"github.com/imserver/imserver/chat"
	"github.com/jackc/pgx/v5"
)

// Sessions and tickets, as storage/sessions.go keeps them in SQLite.

const sessionColumns = `t.session_id, t.created_at, t.last_used_at, t.user_agent, t.address, t.hash`

func sessionDest(sess *chat.Session) []any {
	return []any{&sess.ID, &sess.CreatedAt, &sess.LastUsedAt, &sess.UserAgent, &sess.Address, &sess.TokenHash}
}

// CreateToken implements chat.UserStore.
func (db *DB) CreateToken(ctx context.Context, userID string, tokenHash []byte, sess chat.Session) error {
	return wrap(db.w.exec(ctx, func(t *wtx) error {
		_, err := t.Exec(`INSERT INTO tokens (hash, user_id, created_at, session_id, last_used_at, user_agent, address)
			VALUES ($1, $2, $3, $4, $5, $6, $7)`, tokenHash, userID, sess.CreatedAt, sess.ID, sess.LastUsedAt, sess.UserAgent, sess.Address)
		return err
	}))
}

// SessionByToken implements chat.UserStore.
func (db *DB) SessionByToken(ctx context.Context, tokenHash []byte) (chat.User, chat.Session, error) {
	var u chat.User
	var sess chat.Session
	err := db.pool.QueryRow(ctx, `SELECT u.id, u.username, u.display_name, `+sessionColumns+`
		FROM tokens t JOIN users u ON u.id = t.user_id WHERE t.hash = $1`, tokenHash).
		Scan(append([]any{&u.ID, &u.Username, &u.DisplayName}, sessionDest(&sess)...)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return u, sess, chat.Errorf(chat.ENotFound, "token not found")
	}
	return u, sess, wrap(err)
}

// Sessions implements chat.UserStore.
func (db *DB) Sessions(ctx context.Context, userID string) ([]chat.Session, error) {
	rows, err := db.pool.Query(ctx, `SELECT `+sessionColumns+` FROM tokens t
		WHERE t.user_id = $1 ORDER BY t.last_used_at DESC, t.created_at DESC`, userID)
	if err != nil {
		return nil, wrap(err)
	}
	defer rows.Close()
	list := []chat.Session{}
	for rows.Next() {
		var sess chat.Session
		if err := rows.Scan(sessionDest(&sess)...); err != nil {
			return nil, wrap(err)
		}
		list = append(list, sess)
	}
	return list, wrap(rows.Err())
}

// DeleteSession implements chat.UserStore.
func (db *DB) DeleteSession(ctx context.Context, userID, id string) ([]byte, error) {
	var hash []byte
	err := db.w.exec(ctx, func(t *wtx) error {
		err := t.QueryRow(`DELETE FROM tokens WHERE user_id = $1 AND session_id = $2 RETURNING hash`, userID, id).Scan(&hash)
		if errors.Is(err, pgx.ErrNoRows) {
			return chat.Errorf(chat.ENotFound, "session not found")
		}
		return err
	})
	return hash, wrap(err)
}

// DeleteOtherSessions implements chat.UserStore.
func (db *DB) DeleteOtherSessions(ctx context.Context, userID string, keep []byte) ([][]byte, error) {
	var hashes [][]byte
	err := db.w.exec(ctx, func(t *wtx) error {
		var err error
		hashes, err = deleteOtherTokens(t, userID, keep)
		return err
	})
	return hashes, wrap(err)
}

func deleteOtherTokens(t *wtx, userID string, keep []byte) ([][]byte, error) {
	if keep == nil {
		keep = []byte{}
	}
	rows, err := t.Query(`DELETE FROM tokens WHERE user_id = $1 AND hash <> $2 RETURNING hash`, userID, keep)
	if err != nil {
		return nil, err
	}
	hashes, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if hashes == nil {
		hashes = [][]byte{}
	}
	return hashes, err
}

// ChangePassword implements chat.UserStore.
func (db *DB) ChangePassword(ctx context.Context, userID, passwordHash string, keep []byte) ([][]byte, error) {
	var hashes [][]byte
	err := db.w.exec(ctx, func(t *wtx) error {
		if _, err := t.Exec(`UPDATE users SET password_hash = $1 WHERE id = $2`, passwordHash, userID); err != nil {
			return err
		}
		var err error
		hashes, err = deleteOtherTokens(t, userID, keep)
		return err
	})
	return hashes, wrap(err)
}

// TouchSessions implements chat.UserStore: one statement for all.
func (db *DB) TouchSessions(ctx context.Context, uses []chat.SessionUse) error {
	if len(uses) == 0 {
		return nil
	}
	hashes, at, agents, addrs := make([][]byte, len(uses)), make([]int64, len(uses)), make([]string, len(uses)), make([]string, len(uses))
	for i, u := range uses {
		hashes[i], at[i], agents[i], addrs[i] = u.TokenHash, u.LastUsedAt, u.UserAgent, u.Address
	}
	return wrap(db.w.exec(ctx, func(t *wtx) error {
		_, err := t.Exec(`UPDATE tokens t SET last_used_at = GREATEST(t.last_used_at, u.at),
			user_agent = CASE WHEN u.agent = '' THEN t.user_agent ELSE u.agent END,
			address = CASE WHEN u.addr = '' THEN t.address ELSE u.addr END
			FROM (SELECT DISTINCT ON (h) h, at, agent, addr FROM unnest($1::bytea[], $2::bigint[], $3::text[], $4::text[]) AS x(h, at, agent, addr) ORDER BY h, at DESC) AS u
			WHERE t.hash = u.h`, hashes, at, agents, addrs)
		return err
	}))
}

// CreateTicket implements chat.UserStore; expired tickets are swept in the
// same transaction.
func (db *DB) CreateTicket(ctx context.Context, hash []byte, userID string, tokenHash []byte, expiresAt int64) error {
	return wrap(db.w.exec(ctx, func(t *wtx) error {
		if _, err := t.Exec(`DELETE FROM tickets WHERE expires_at <= $1`, nowMS()); err != nil {
			return err
		}
		_, err := t.Exec(`INSERT INTO tickets (hash, user_id, token_hash, expires_at) VALUES ($1, $2, $3, $4)`,
			hash, userID, tokenHash, expiresAt)
		return err
	}))
}

// UseTicket implements chat.UserStore: one conditional UPDATE, which makes
// a ticket single-use across nodes.
func (db *DB) UseTicket(ctx context.Context, hash []byte, now int64) ([]byte, error) {
	var tokenHash []byte
	err := db.w.exec(ctx, func(t *wtx) error {
		err := t.QueryRow(`UPDATE tickets SET used = 1 WHERE hash = $1 AND used = 0 AND expires_at > $2 RETURNING token_hash`,
			hash, now).Scan(&tokenHash)
		if errors.Is(err, pgx.ErrNoRows) {
			return chat.Errorf(chat.ENotFound, "ticket not found")
		}
		return err
	})
	return tokenHash, wrap(err)
}

// TicketToken implements chat.UserStore.
func (db *DB) TicketToken(ctx context.Context, hash []byte, now int64) ([]byte, error) {
	var tokenHash []byte
	err := db.pool.QueryRow(ctx, `SELECT token_hash FROM tickets WHERE hash = $1 AND used = 0 AND expires_at > $2`, hash, now).Scan(&tokenHash)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, chat.Errorf(chat.ENotFound, "ticket not found")
	}
	return tokenHash, wrap(err)
}

// DeleteExpiredSessions implements chat.UserStore.
func (db *DB) DeleteExpiredSessions(ctx context.Context, usedBefore, createdBefore int64) error {
	return wrap(db.w.exec(ctx, func(t *wtx) error {
		_, err := t.Exec(`DELETE FROM tokens WHERE last_used_at < $1 OR created_at < $2`, usedBefore, createdBefore)
		return err
	}))
}
