package storage

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"strconv"
)

// Migration 0009: messages stored in arrival order. Until 0008 the
// messages table was keyed by (conv, seq) WITHOUT ROWID, so each message,
// a row of ~150 bytes, was inserted at the end of its conversation's range
// in the middle of the table: a commit whose messages go to 40
// conversations dirtied 40 leaf pages of it, and SQLite rebalances a full
// leaf in the middle of a tree with its siblings (3 pages and their
// parent) far more often than one at the table's end. The WAL showed 1.9
// pages of that table per message of the interactive bench, 4 pages per
// message in all (BENCHMARKS.md, "Messages in arrival order").
//
// Now the rows are keyed by an integer that grows with each insert (the
// rowid), so a commit appends them to the table's last pages; the (conv,
// seq) look-up is a narrow unique index, messages_seq, whose entries
// (three integers) need a page split a tenth as often. A conversation's
// rows are no longer adjacent in the file: a page of history reads rows
// from more pages, which the (conv, seq) order of old messages (copied
// here in that order) and the burst order of new ones keep few.
//
// Like 0006, the copy is done in batches, each its own transaction; the
// last row copied is where the next start goes on after a kill -9. A last
// transaction swaps the tables and builds the indexes.

const (
	layoutVersion = 9
	layoutName    = "0009_arrival_order"
)

// layoutBatch is how many messages one copy transaction takes (tests make
// it small).
var layoutBatch = 100000

// layoutColumns are the messages table's columns, but the rowid.
const layoutColumns = `conv, seq, sender, cmid_hash, client_msg_id, kind, body, ts, target, emoji, reaction_on, reply_to, mentions, edited_at, deleted, doc, stale`

const layoutTable = `CREATE TABLE messages_v9 (
	id            INTEGER PRIMARY KEY,
	conv          INTEGER NOT NULL,
	seq           INTEGER NOT NULL,
	sender        INTEGER NOT NULL,
	cmid_hash     INTEGER NOT NULL,
	client_msg_id TEXT NOT NULL,
	kind          TEXT NOT NULL,
	body          TEXT NOT NULL,
	ts            INTEGER NOT NULL,
	target        INTEGER,
	emoji         TEXT,
	reaction_on   INTEGER,
	reply_to      INTEGER,
	mentions      TEXT,
	edited_at     INTEGER,
	deleted       INTEGER,
	doc           INTEGER,
	stale         TEXT
)`

// layoutSwap replaces the old table by the new one and builds its indexes
// (after the copy: one sorted build each instead of a random insert per
// row). messages_cmid lives only until 0010, which runs next in the same
// start, copies it into the dedup levels and drops it: it carries seq so
// that the copy reads the index alone, and need not be unique (the rows
// it indexes were).
var layoutSwap = []string{
	`DROP TABLE messages`,
	`ALTER TABLE messages_v9 RENAME TO messages`,
	`CREATE UNIQUE INDEX messages_seq ON messages (conv, seq)`,
	`CREATE INDEX messages_cmid ON messages (conv, sender, cmid_hash, seq)`,
	`CREATE INDEX messages_targets ON messages (conv, target) WHERE target IS NOT NULL`,
}

// migrateLayout runs migration 0009 from wherever an earlier run stopped.
func migrateLayout(ctx context.Context, db *sql.DB, log *slog.Logger) error {
	return copyMigration{
		version: layoutVersion, name: layoutName,
		title: "migration 0009 (messages in arrival order)", what: "messages",
		table: "messages_v9", schema: layoutTable,
		batch: func(ctx context.Context, tx *sql.Tx) (int64, bool, string, error) {
			n, err := copyLayoutBatch(ctx, tx)
			return n, n == 0, "", err
		},
		finish: layoutSwap,
	}.run(ctx, db, log)
}

// copyLayoutBatch copies the next layoutBatch messages in (conv, seq)
// order after the last one the new table holds, and returns how many.
func copyLayoutBatch(ctx context.Context, tx *sql.Tx) (int64, error) {
	var conv, seq int64
	err := tx.QueryRowContext(ctx, `SELECT conv, seq FROM messages_v9 ORDER BY id DESC LIMIT 1`).Scan(&conv, &seq)
	if errors.Is(err, sql.ErrNoRows) {
		conv, seq, err = -1<<63, -1<<63, nil
	}
	if err != nil {
		return 0, err
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO messages_v9 (`+layoutColumns+`)
		SELECT `+layoutColumns+` FROM messages WHERE (conv, seq) > (?, ?) ORDER BY conv, seq LIMIT `+strconv.Itoa(layoutBatch),
		conv, seq)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
