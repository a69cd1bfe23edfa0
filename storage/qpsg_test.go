package storage

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"modernc.org/libc"
	sqlite3 "modernc.org/sqlite/lib"
)

// TestSecureDeletePlansOnce: the deletes of messages spread over several
// index segments leave FTS5's term look-up prepared once, not once per
// segment it seeks (qpsg.go).
func TestSecureDeletePlansOnce(t *testing.T) {
	ctx := context.Background()
	db, _ := openTest(t, Options{})
	if on, err := qpsgEnabled(db.w.conn); err != nil || !on {
		t.Fatalf("the writer's query planner stability guarantee: %v (%v)", on, err)
	}
	if err := db.CreateGroup(ctx, "g", "g", "u", nil); err != nil {
		t.Fatal(err)
	}
	// One send per commit: each leaves a segment, and automerge keeps a
	// few of them, the newest with the smallest ids.
	seqs := texts(t, db, 40)
	for i, seq := range seqs[:20] {
		send(t, db, deleteMsg("u", fmt.Sprint("d", i), seq))
	}
	n, sqlText, err := indexLookupReprepares(db.w.conn)
	if err != nil {
		t.Fatal(err)
	}
	if sqlText == "" {
		t.Fatal("FTS5's term look-up was never prepared: the deletes did not seek the index")
	}
	if n != 0 {
		t.Fatalf("%q was prepared again %d times by 20 deletes", sqlText, n)
	}
}

// indexLookupReprepares returns how often the statement FTS5 uses to find
// a term's page in a segment was prepared again, and its text ("" when
// the connection has not prepared it).
func indexLookupReprepares(conn *sql.Conn) (n int32, text string, err error) {
	err = onSQLite(conn, func(db uintptr, tls *libc.TLS) error {
		for st := sqlite3.Xsqlite3_next_stmt(tls, db, 0); st != 0; st = sqlite3.Xsqlite3_next_stmt(tls, db, st) {
			if q := libc.GoString(sqlite3.Xsqlite3_sql(tls, st)); strings.HasPrefix(q, "SELECT pgno FROM") && strings.Contains(q, "messages_fts_idx") {
				n += sqlite3.Xsqlite3_stmt_status(tls, st, sqlite3.SQLITE_STMTSTATUS_REPREPARE, 0)
				text = q
			}
		}
		return nil
	})
	return n, text, err
}

// A connection of another driver, or of this one renamed, is an error, not
// a panic.
func TestSQLiteHandleOfAnotherDriver(t *testing.T) {
	for _, dc := range []any{nil, 7, &struct{ db uintptr }{}, &struct {
		db  uintptr
		tls int
	}{}} {
		if _, _, err := sqliteHandle(dc); err == nil {
			t.Errorf("sqliteHandle(%T) found a handle", dc)
		}
	}
}

// qpsgEnabled reports whether conn has the guarantee.
func qpsgEnabled(conn *sql.Conn) (bool, error) {
	var on int32
	err := onSQLite(conn, func(db uintptr, tls *libc.TLS) error {
		var err error
		on, err = dbConfig(tls, db, sqlite3.SQLITE_DBCONFIG_ENABLE_QPSG, -1)
		return err
	})
	return on == 1, err
}
