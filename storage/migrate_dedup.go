package storage

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
)

// Migration 0010: the dedup key moves from the unique index messages_cmid
// into the levels of dedup.go. Every entry of the index is copied into
// the last level, dedup_2, in key order, in batches that are each their
// own transaction; a batch starts after the largest key already in
// dedup_2, so a kill -9 costs one batch and the next start goes on from
// there. A last short transaction drops the index and records the
// version. The server does not serve until it is done.

const (
	dedupVersion = 10
	dedupName    = "0010_dedup_levels"
)

// dedupBatch is how many entries one copy transaction takes (tests make
// it small).
var dedupBatch = 500000

const dedupSchema = `
CREATE TABLE dedup_0 (conv INTEGER NOT NULL, sender INTEGER NOT NULL, cmid_hash INTEGER NOT NULL, seq INTEGER NOT NULL,
	PRIMARY KEY (conv, sender, cmid_hash)) WITHOUT ROWID;
CREATE TABLE dedup_1 (conv INTEGER NOT NULL, sender INTEGER NOT NULL, cmid_hash INTEGER NOT NULL, seq INTEGER NOT NULL,
	PRIMARY KEY (conv, sender, cmid_hash)) WITHOUT ROWID;
CREATE TABLE dedup_2 (conv INTEGER NOT NULL, sender INTEGER NOT NULL, cmid_hash INTEGER NOT NULL, seq INTEGER NOT NULL,
	PRIMARY KEY (conv, sender, cmid_hash)) WITHOUT ROWID;
`

// migrateDedup runs migration 0010 from wherever an earlier run stopped.
func migrateDedup(ctx context.Context, db *sql.DB, log *slog.Logger) error {
	return copyMigration{
		version: dedupVersion, name: dedupName,
		title: "migration 0010 (dedup levels)", what: "the dedup index",
		table: "dedup_2", schema: dedupSchema,
		batch: func(ctx context.Context, tx *sql.Tx) (int64, bool, string, error) {
			n, err := copyDedupBatch(ctx, tx)
			return n, n < int64(dedupBatch), "", err
		},
		finish: []string{`DROP INDEX messages_cmid`},
	}.run(ctx, db, log)
}

// copyDedupBatch copies the next dedupBatch entries of the index into
// dedup_2, after the largest key it holds, and returns how many.
func copyDedupBatch(ctx context.Context, tx *sql.Tx) (int64, error) {
	at := dedupBelowAll
	err := tx.QueryRowContext(ctx, `SELECT conv, sender, cmid_hash FROM dedup_2 ORDER BY conv DESC, sender DESC, cmid_hash DESC LIMIT 1`).
		Scan(&at.conv, &at.sender, &at.hash)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, err
	}
	// The copy reads the index alone, in its order (0009 made it
	// carry seq).
	res, err := tx.ExecContext(ctx, `INSERT INTO dedup_2 (conv, sender, cmid_hash, seq)
		SELECT conv, sender, cmid_hash, seq FROM messages INDEXED BY messages_cmid
		WHERE (conv, sender, cmid_hash) > (?, ?, ?) ORDER BY conv, sender, cmid_hash LIMIT ?`,
		at.conv, at.sender, at.hash, dedupBatch)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
