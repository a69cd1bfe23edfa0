package storage

import "context"

// ExecOnWriterForTest runs statement (a PRAGMA) on the writer's own
// connection, in a transaction of its own. Tests use it to make writes fail
// as a full or read-only disk makes them fail (PRAGMA max_page_count, PRAGMA
// query_only): settings of that one connection, which neither the readers
// nor another connection can change. Not for production use.
func (db *DB) ExecOnWriterForTest(ctx context.Context, statement string) error {
	return db.w.exec(ctx, func(t *wtx) error {
		rows, err := t.QueryContext(t.ctx, statement)
		if err != nil {
			return err
		}
		for rows.Next() {
		}
		return rows.Close()
	})
}
