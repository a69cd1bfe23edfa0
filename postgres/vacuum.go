package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// vacuumTables are the tables that grow with use, biggest first: where
// deletions (retention, deleted messages, expired tokens) leave dead rows.
var vacuumTables = []string{"messages", "mentions", "reactions", "message_files", "files", "members", "uncounted", "tokens", "tickets", "conversations", "users"}

// VacuumTable is what VACUUM did to one table.
type VacuumTable struct {
	Name        string
	DeadRows    int64 // dead row versions before (pg_stat_user_tables.n_dead_tup)
	BytesBefore int64 // with indexes and TOAST
	BytesAfter  int64
}

// Vacuum runs VACUUM (ANALYZE) on imserver's growing tables, one at a time
// on a connection of its own (nodes keep serving: plain VACUUM takes no
// lock that blocks reads or writes). It marks dead rows' space reusable and
// refreshes the planner's statistics; the tables' files shrink only where
// their end is empty. full runs VACUUM (FULL, ANALYZE) instead, which
// rewrites each table and gives the space back to the file system (and
// overwrites deleted messages' bytes) but locks the table while it does:
// a quiet hour's job. Autovacuum does the plain kind by itself; this is
// for after a big deletion, or to see the figures.
func Vacuum(ctx context.Context, url string, full bool) ([]VacuumTable, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("connecting to the database: %w", err)
	}
	defer conn.Close(context.Background())
	var v int
	if err := conn.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&v); err != nil {
		return nil, fmt.Errorf("not an imserver database: %w", err)
	}
	opts := "(ANALYZE)"
	if full {
		opts = "(FULL, ANALYZE)"
	}
	var out []VacuumTable
	for _, name := range vacuumTables {
		t := VacuumTable{Name: name}
		var exists bool
		err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&exists)
		if err != nil {
			return out, err
		}
		if !exists {
			continue
		}
		err = conn.QueryRow(ctx, `SELECT pg_total_relation_size(to_regclass($1)),
			COALESCE((SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = to_regclass($1)), 0)`, name).Scan(&t.BytesBefore, &t.DeadRows)
		if err != nil {
			return out, err
		}
		if _, err := conn.Exec(ctx, `VACUUM `+opts+` `+pgx.Identifier{name}.Sanitize()); err != nil {
			if errors.Is(ctx.Err(), context.Canceled) {
				return out, ctx.Err()
			}
			return out, fmt.Errorf("VACUUM %s: %w", name, err)
		}
		if err := conn.QueryRow(ctx, `SELECT pg_total_relation_size(to_regclass($1))`, name).Scan(&t.BytesAfter); err != nil {
			return out, err
		}
		out = append(out, t)
	}
	return out, nil
}
