package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Contacts implements chat.ConversationStore: typing and presence go to
// the user's current fellow members.
func (db *DB) Contacts(ctx context.Context, user, except string) ([]string, error) {
	return db.contacts(ctx, `SELECT DISTINCT o.user_id FROM members m
		JOIN members o ON o.conv_id = m.conv_id AND o.max_seq IS NULL AND o.user_id <> m.user_id
		WHERE m.user_id = $1 AND m.max_seq IS NULL AND m.conv_id <> $2`, user, except)
}

// ContactsEver implements chat.ConversationStore.
func (db *DB) ContactsEver(ctx context.Context, user string) ([]string, error) {
	return db.contacts(ctx, `SELECT DISTINCT o.user_id FROM members m
		JOIN members o ON o.conv_id = m.conv_id AND o.max_seq IS NULL AND o.user_id <> m.user_id
		WHERE m.user_id = $1`, user)
}

func (db *DB) contacts(ctx context.Context, q string, args ...any) ([]string, error) {
	rows, err := db.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, wrap(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if ids == nil {
		ids = []string{}
	}
	return ids, wrap(err)
}
