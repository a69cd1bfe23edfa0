package storage

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"
)

// copyMigration is a migration that copies a big table's rows into a new
// one in batches, each its own transaction that leaves the copy where the
// next start can go on from after a kill -9 (each batch finds its start in
// what the new table holds, or in a progress row), then finishes in one
// last transaction that swaps the tables and records the version. The
// server does not serve until it is done. 0006, 0009 and 0010 are such
// migrations.
type copyMigration struct {
	version int
	name    string // as recorded in schema_migrations, without ".go"
	title   string // for the log: "migration 0009 (messages in arrival order)"
	what    string // what is copied, for the log: "messages"
	// table is made by schema (in a transaction of its own) unless it
	// exists: an earlier run made it.
	table, schema string
	// batch copies the next batch and returns how many rows it copied,
	// whether the copy is complete, and where it got ("" to say nothing).
	batch func(ctx context.Context, tx *sql.Tx) (n int64, done bool, at string, err error)
	// finish is run in the last transaction, before the version's row.
	finish []string
}

func (c copyMigration) run(ctx context.Context, db *sql.DB, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_master WHERE name = ?`, c.table).Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		if err := inTx(ctx, db, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, c.schema)
			return err
		}); err != nil {
			return err
		}
	}
	start := time.Now()
	var copied int64
	for {
		var batch int64
		var done bool
		var at string
		if err := inTx(ctx, db, func(tx *sql.Tx) error {
			var err error
			batch, done, at, err = c.batch(ctx, tx)
			return err
		}); err != nil {
			return err
		}
		copied += batch
		if done {
			break
		}
		args := []any{"copied", copied, "per_second", int(float64(copied) / time.Since(start).Seconds())}
		if at != "" {
			args = append(args, "at", at)
		}
		log.Info(c.title+": copying "+c.what+"; a restart goes on from here", args...)
	}
	err := inTx(ctx, db, func(tx *sql.Tx) error {
		for _, q := range c.finish {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				return fmt.Errorf("%s: %w", q, err)
			}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`, c.version, c.name+".go", nowMS())
		return err
	})
	if err == nil && copied > 0 {
		log.Info(c.title+": done", "copied", copied, "seconds", time.Since(start).Seconds())
	}
	return err
}

func inTx(ctx context.Context, db *sql.DB, f func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := f(tx); err != nil {
		return err
	}
	return tx.Commit()
}
