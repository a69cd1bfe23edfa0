package storage

import (
	"errors"
	"syscall"

	"github.com/imserver/imserver/chat"
	"github.com/imserver/imserver/internal/writehealth"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// retryAfterMS is what a client is told to wait when the database cannot
// be written: long enough not to hammer a full disk, short enough that a
// freed disk is used soon.
const retryAfterMS = 5000

// failureKind names the storage failure err is, or "" when err is not one.
// These are conditions of the machine (disk full, read-only file system,
// failing disk), not bugs: the client may retry and the operator must act.
func failureKind(err error) string {
	if err == nil {
		return ""
	}
	var e *sqlite.Error
	if errors.As(err, &e) {
		// Extended codes (SQLITE_IOERR_WRITE, SQLITE_READONLY_DBMOVED...)
		// carry their primary code in the low byte.
		switch e.Code() & 0xff {
		case sqlite3.SQLITE_FULL:
			return writehealth.Full
		case sqlite3.SQLITE_READONLY:
			return writehealth.ReadOnly
		case sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN:
			return writehealth.IO
		}
	}
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return writehealth.Full
	case errors.Is(err, syscall.EROFS):
		return writehealth.ReadOnly
	case errors.Is(err, syscall.EIO):
		return writehealth.IO
	}
	return ""
}

// unavailable wraps a storage failure as the domain's unavailable error,
// which the server answers with 503 and Retry-After; other errors are
// returned as they are.
func unavailable(err error) error {
	kind := failureKind(err)
	if kind == "" {
		return err
	}
	return &chat.Error{Code: chat.EUnavailable, Message: "the database cannot be written (" + writehealth.Text(kind) + "); retry later", RetryAfterMS: retryAfterMS}
}

// WriteHealth implements chat.Store: nil while writes succeed, the
// unavailable error writes are answered with otherwise.
func (db *DB) WriteHealth() error {
	if err := db.w.health.Err(); err != nil {
		return &chat.Error{Code: chat.EUnavailable, Message: "the database cannot be written; retry later", RetryAfterMS: retryAfterMS}
	}
	return nil
}
