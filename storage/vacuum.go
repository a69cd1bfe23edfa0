package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// ErrInUse refuses to vacuum a database that a process has open.
var ErrInUse = errors.New("the database is open in another process (a running imserver?); stop it first")

// VacuumResult is the file size before and after a vacuum (database and
// WAL together).
type VacuumResult struct {
	Before, After int64
}

// Vacuum rebuilds the database file at path, giving back the pages that
// deletions (retention, cleared histories) freed. It needs the file to
// itself: a running server keeps connections open, and VACUUM beside it
// would hold the write lock for as long as the copy takes (every send
// waiting) and need twice the space while readers pin the old pages. So
// it takes SQLite's exclusive lock first, without waiting, and returns
// ErrInUse if any other connection has the file open.
func Vacuum(ctx context.Context, path string) (VacuumResult, error) {
	var res VacuumResult
	if _, err := os.Stat(path); err != nil {
		return res, err
	}
	res.Before = fileBytes(path)
	// locking_mode EXCLUSIVE in WAL mode: the first transaction takes the
	// exclusive lock on the file, which fails while another connection
	// has it open, and keeps it until this connection closes.
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(0)&_pragma=locking_mode(EXCLUSIVE)")
	if err != nil {
		return res, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	conn, err := db.Conn(ctx)
	if err != nil {
		return res, lockErr(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN EXCLUSIVE"); err != nil {
		return res, lockErr(err)
	}
	var n int
	if err := conn.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_schema WHERE name = 'schema_migrations'`).Scan(&n); err != nil {
		conn.ExecContext(ctx, "ROLLBACK")
		return res, err
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return res, err
	}
	if n == 0 {
		return res, fmt.Errorf("%s is not an imserver database", path)
	}
	if _, err := conn.ExecContext(ctx, "VACUUM"); err != nil {
		return res, fmt.Errorf("vacuum: %w", err)
	}
	if _, err := conn.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		return res, fmt.Errorf("checkpoint after vacuum: %w", err)
	}
	if err := conn.Close(); err != nil {
		return res, err
	}
	if err := db.Close(); err != nil {
		return res, err
	}
	res.After = fileBytes(path)
	return res, nil
}

// CheckUnused returns ErrInUse while another process (a server) has the
// SQLite database at path open, nil when none has or there is no file:
// for a command that replaces the file (restore), which a running server
// would go on writing to, acknowledging messages that would be lost.
func CheckUnused(ctx context.Context, path string) error {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	// As Vacuum: an exclusive lock, which fails beside any other
	// connection, released at once.
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(0)&_pragma=locking_mode(EXCLUSIVE)")
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	conn, err := db.Conn(ctx)
	if err != nil {
		return lockErr(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN EXCLUSIVE"); err != nil {
		return lockErr(err)
	}
	_, err = conn.ExecContext(ctx, "ROLLBACK")
	return err
}

func lockErr(err error) error {
	var e *sqlite.Error
	if errors.As(err, &e) && e.Code()&0xff == sqlite3.SQLITE_BUSY {
		return ErrInUse
	}
	return err
}

func fileBytes(path string) int64 {
	var n int64
	for _, p := range []string{path, path + "-wal"} {
		if fi, err := os.Stat(p); err == nil {
			n += fi.Size()
		}
	}
	return n
}
