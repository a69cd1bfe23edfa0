package storage

import "context"

// ExecOnWriterForTest runs statement (a PRAGMA) on the writer's own
// connection, between two of its transactions. Tests use it to make writes
// fail as a full or read-only disk makes them fail (PRAGMA max_page_count,
// PRAGMA query_only): settings of that one connection, which neither the
// readers nor another connection can change. Not for production use.
func (db *DB) ExecOnWriterForTest(ctx context.Context, statement string) error {
	// Raw holds the connection's lock, which the writer holds for a whole
	// transaction: this runs between two.
	return db.w.raw(func(dc driverConn) error {
		t := &wtx{w: db.w, dc: dc, ctx: ctx}
		rows, err := t.QueryContext(ctx, statement)
		if err != nil {
			return err
		}
		for rows.Next() {
		}
		return rows.Close()
	})
}
