package storage

import (
	"database/sql"
	"fmt"
	"reflect"

	"modernc.org/libc"
	sqlite3 "modernc.org/sqlite/lib"
)

// The writer's connection runs with SQLite's query planner stability
// guarantee (SQLITE_DBCONFIG_ENABLE_QPSG): a statement's plan never
// depends on the values bound to it.
//
// Without it, the statement FTS5 uses to find a term's page in a segment
// ("SELECT pgno FROM messages_fts_idx WHERE segid=? AND term<=? ...") is
// planned anew each time its segid moves off 0 or 1 (SQLite asks whether
// `x = ?` binds a small integer when it estimates a plan's rows, and
// replans when that answer may change). A secure delete seeks each of the
// erased words in every segment, and FTS5 gives the newest segments the
// smallest ids, so a delete prepared that statement again for most of its
// words: a third of what the erasure cost the writer
// (BENCHMARKS.md, session 12). The writer binds no LIKE pattern and the
// database has no ANALYZE statistics; its statements that bind a LIMIT or
// a small integer plan the same either way (EXPLAIN QUERY PLAN with and
// without the guarantee). The readers keep the default: a user search
// binds a LIKE prefix.

// enableQPSG sets the guarantee on conn, a connection of this package's
// driver (modernc.org/sqlite), which has no option for it: the call needs
// the driver's connection handle, read from its unexported fields.
func enableQPSG(conn *sql.Conn) error {
	return onSQLite(conn, func(db uintptr, tls *libc.TLS) error {
		if on, err := dbConfig(tls, db, sqlite3.SQLITE_DBCONFIG_ENABLE_QPSG, 1); err != nil {
			return err
		} else if on != 1 {
			return fmt.Errorf("storage: SQLite did not enable the query planner stability guarantee")
		}
		return nil
	})
}

// onSQLite runs fn with the sqlite3* of conn and its C thread state, the
// connection held for fn alone.
func onSQLite(conn *sql.Conn, fn func(db uintptr, tls *libc.TLS) error) error {
	return conn.Raw(func(dc any) error {
		db, tls, err := sqliteHandle(dc)
		if err != nil {
			return err
		}
		return fn(db, tls)
	})
}

// sqliteHandle returns the sqlite3* and the C thread state of a driver
// connection (modernc.org/sqlite's conn: db uintptr, tls *libc.TLS).
func sqliteHandle(dc any) (uintptr, *libc.TLS, error) {
	v := reflect.ValueOf(dc)
	if v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	if v.Kind() == reflect.Struct {
		db, tls := v.FieldByName("db"), v.FieldByName("tls")
		if db.IsValid() && tls.IsValid() && db.Kind() == reflect.Uintptr && tls.Type() == reflect.TypeFor[*libc.TLS]() {
			return uintptr(db.Uint()), (*libc.TLS)(tls.UnsafePointer()), nil
		}
	}
	return 0, nil, fmt.Errorf("storage: %T is not the SQLite connection this package was built for", dc)
}

// dbConfig calls sqlite3_db_config(db, op, value, &out) for an op that
// takes an int (-1 leaves it as it is) and returns out, the setting now.
func dbConfig(tls *libc.TLS, db uintptr, op int32, value int32) (int32, error) {
	// The variadic arguments and out live in C memory: two slots of 8
	// bytes (libc.VaList), then out.
	p, err := cAlloc(tls, 24)
	if err != nil {
		return 0, err
	}
	defer libc.Xfree(tls, p)
	out := p + 16
	if rc := sqlite3.Xsqlite3_db_config(tls, db, op, libc.VaList(p, value, out)); rc != sqlite3.SQLITE_OK {
		return 0, fmt.Errorf("storage: sqlite3_db_config(%d): %s", op, libc.GoString(sqlite3.Xsqlite3_errstr(tls, rc)))
	}
	return *(*int32)(cptr(out)), nil
}
