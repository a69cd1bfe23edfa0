package storage

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"sort"
	"strconv"
	"strings"
)

//go:embed migrations/*.sql
var embeddedMigrationFiles embed.FS

// migrations is what migrate applies: the embedded files (tests add one).
var migrations fs.FS = embeddedMigrationFiles

// SchemaTooNewError refuses a database that a newer imserver migrated: this
// binary does not know its tables and could damage them.
type SchemaTooNewError struct {
	Schema int // newest migration applied to the database
	Known  int // newest migration this binary embeds
}

func (e *SchemaTooNewError) Error() string {
	return fmt.Sprintf("database schema %d is newer than this imserver (knows up to %d); upgrade imserver", e.Schema, e.Known)
}

// goMigration is a migration written in Go: one that must work in steps
// of their own transactions (migrate_keys.go). It records its version
// itself, in its last transaction.
type goMigration struct {
	version int
	name    string
	run     func(ctx context.Context, db *sql.DB, log *slog.Logger) error
}

// goMigrations are the Go migrations, numbered among the files.
var goMigrations = []goMigration{{keysVersion, keysName, migrateKeys}, {layoutVersion, layoutName, migrateLayout}, {dedupVersion, dedupName, migrateDedup}}

// embeddedMigrations lists the migrations by number, in order: the
// embedded files and the Go ones (whose names end in .go).
func embeddedMigrations() ([]int, []string, error) {
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return nil, nil, err
	}
	for _, g := range goMigrations {
		names = append(names, "migrations/"+g.name+".go")
	}
	sort.Strings(names)
	versions := make([]int, len(names))
	for i, name := range names {
		base := strings.TrimPrefix(name, "migrations/")
		v, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
		if err != nil {
			return nil, nil, fmt.Errorf("migration %s: name must start with a number", base)
		}
		versions[i] = v
	}
	return versions, names, nil
}

// KnownSchema is the newest migration this binary embeds.
func KnownSchema() int {
	versions, _, err := embeddedMigrations()
	if err != nil || len(versions) == 0 {
		return 0
	}
	return versions[len(versions)-1]
}

// migrate applies the embedded migrations not yet recorded, each in its own
// transaction, in file-name order (NNNN_name.sql). A database already past
// the newest of them is refused with *SchemaTooNewError.
func migrate(ctx context.Context, db *sql.DB, log *slog.Logger) error {
	return migrateTo(ctx, db, math.MaxInt, log)
}

// migrateTo applies the migrations up to version last (tests build
// databases as older versions left them).
func migrateTo(ctx context.Context, db *sql.DB, last int, log *slog.Logger) error {
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`); err != nil {
		return fmt.Errorf("migrations table: %w", err)
	}
	versions, names, err := embeddedMigrations()
	if err != nil {
		return err
	}
	current, err := schemaVersion(ctx, db)
	if err != nil {
		return err
	}
	if known := KnownSchema(); current > known {
		return &SchemaTooNewError{Schema: current, Known: known}
	}
	for i, name := range names {
		base := strings.TrimPrefix(name, "migrations/")
		if versions[i] > last {
			break
		}
		if strings.HasSuffix(base, ".go") {
			for _, g := range goMigrations {
				if g.version == versions[i] && current < g.version {
					if err := g.run(ctx, db, log); err != nil {
						return fmt.Errorf("migration %s: %w", g.name, err)
					}
				}
			}
			continue
		}
		body, err := fs.ReadFile(migrations, name)
		if err != nil {
			return err
		}
		if err := applyMigration(ctx, db, versions[i], base, string(body)); err != nil {
			return fmt.Errorf("migration %s: %w", base, err)
		}
	}
	return nil
}

// schemaVersion is the newest migration applied to the database (0: none).
func schemaVersion(ctx context.Context, q queryRower) (int, error) {
	var v sql.NullInt64
	if err := q.QueryRowContext(ctx, `SELECT MAX(version) FROM schema_migrations`).Scan(&v); err != nil {
		return 0, fmt.Errorf("schema version: %w", err)
	}
	return int(v.Int64), nil
}

// SchemaVersion is the newest migration applied to the database.
func (db *DB) SchemaVersion(ctx context.Context) (int, error) {
	return schemaVersion(ctx, db.readers)
}

func applyMigration(ctx context.Context, db *sql.DB, version int, name, body string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations WHERE version = ?`, version).Scan(&n); err != nil {
		return err
	}
	if n > 0 {
		return nil
	}
	if _, err := tx.ExecContext(ctx, body); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`, version, name, nowMS()); err != nil {
		return err
	}
	return tx.Commit()
}
