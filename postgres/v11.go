package postgres

import (
	"context"

	"github.com/imserver/imserver/chat"
	"github.com/jackc/pgx/v5"
)

// The v1.1 features landed on SQLite (storage/mutations.go, search.go)
// after this store was written. Until their PostgreSQL versions exist,
// what needs them is refused as unavailable rather than stored without
// its meaning: a mutation stored as a plain row would never change its
// target, a reply or mentions would be lost.

// errNotYet refuses a feature this store does not have yet.
func errNotYet(what string) error {
	return chat.Errorf(chat.EUnavailable, "%s: not supported on postgres yet", what)
}

// needsV11 reports whether m needs the v1.1 columns and tables (the
// counterpart of storage's needsExtras).
func needsV11(m chat.Message) bool {
	return m.Kind != chat.KindText && m.Kind != chat.KindSystem || m.ReplyTo != 0 || len(m.Mentions) > 0 || m.Target != 0
}

// Search implements chat.MessageStore: not on PostgreSQL yet (tsvector and
// GIN are the plan, DESIGN.md).
func (db *DB) Search(context.Context, string, chat.SearchQuery) (chat.SearchResults, error) {
	return chat.SearchResults{}, errNotYet("search")
}

// Contacts implements chat.ConversationStore.
func (db *DB) Contacts(ctx context.Context, user string) ([]string, error) {
	rows, err := db.pool.Query(ctx, `SELECT DISTINCT o.user_id FROM members m
		JOIN members o ON o.conv_id = m.conv_id AND o.max_seq IS NULL AND o.user_id <> m.user_id
		WHERE m.user_id = $1 AND m.max_seq IS NULL`, user)
	if err != nil {
		return nil, wrap(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if ids == nil {
		ids = []string{}
	}
	return ids, wrap(err)
}
