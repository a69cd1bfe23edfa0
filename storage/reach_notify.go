package storage

import (
	"context"

	"github.com/imserver/imserver/chat"
)

// SetMute implements chat.NotifyStore.
func (db *DB) SetMute(ctx context.Context, conv, user string, until int64) error {
	return db.w.exec(ctx, func(t *wtx) error {
		v, err := t.nextVersion()
		if err != nil {
			return err
		}
		res, err := t.ExecContext(t.ctx, `UPDATE members SET muted_until = ?, version = ? WHERE conv_id = ? AND user_id = ?`, until, v, conv, user)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return db.missingMember(t.ctx, db.readers, conv)
		}
		return nil
	})
}

// AddPushSubscription implements chat.NotifyStore.
func (db *DB) AddPushSubscription(ctx context.Context, sub chat.PushSubscription) error {
	return db.w.exec(ctx, func(t *wtx) error {
		_, err := t.ExecContext(t.ctx, `INSERT INTO push_subscriptions (endpoint, user_id, p256dh, auth, created_at) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (endpoint) DO UPDATE SET user_id = excluded.user_id, p256dh = excluded.p256dh, auth = excluded.auth, created_at = excluded.created_at`,
			sub.Endpoint, sub.UserID, sub.P256dh, sub.Auth, sub.CreatedAt)
		if err != nil {
			return err
		}
		// A user's browsers come and go; keep the newest few, so that a
		// client subscribing in a loop cannot grow the table.
		_, err = t.ExecContext(t.ctx, `DELETE FROM push_subscriptions WHERE user_id = ?1 AND endpoint NOT IN
			(SELECT endpoint FROM push_subscriptions WHERE user_id = ?1 ORDER BY created_at DESC, endpoint LIMIT ?2)`, sub.UserID, maxPushSubscriptions)
		return err
	})
}

// maxPushSubscriptions bounds the subscriptions (browsers) of one user.
const maxPushSubscriptions = 20

// DeletePushSubscription implements chat.NotifyStore.
func (db *DB) DeletePushSubscription(ctx context.Context, user, endpoint string) error {
	return db.w.exec(ctx, func(t *wtx) error {
		_, err := t.ExecContext(t.ctx, `DELETE FROM push_subscriptions WHERE endpoint = ?1 AND (?2 = '' OR user_id = ?2)`, endpoint, user)
		return err
	})
}

// PushSubscriptions implements chat.NotifyStore.
func (db *DB) PushSubscriptions(ctx context.Context, user string) ([]chat.PushSubscription, error) {
	rows, err := db.readers.QueryContext(ctx, `SELECT endpoint, user_id, p256dh, auth, created_at FROM push_subscriptions WHERE user_id = ? ORDER BY created_at`, user)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []chat.PushSubscription
	for rows.Next() {
		var s chat.PushSubscription
		if err := rows.Scan(&s.Endpoint, &s.UserID, &s.P256dh, &s.Auth, &s.CreatedAt); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// InitSetting implements chat.NotifyStore.
func (db *DB) InitSetting(ctx context.Context, name string, value []byte) ([]byte, error) {
	var stored []byte
	err := db.w.exec(ctx, func(t *wtx) error {
		if _, err := t.ExecContext(t.ctx, `INSERT INTO settings (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING`, name, value); err != nil {
			return err
		}
		return t.QueryRowContext(t.ctx, `SELECT value FROM settings WHERE name = ?`, name).Scan(&stored)
	})
	return stored, err
}
