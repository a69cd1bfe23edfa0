package storage

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"syscall"
	"time"

	"github.com/imserver/imserver/chat"
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
			return "full"
		case sqlite3.SQLITE_READONLY:
			return "readonly"
		case sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN:
			return "io"
		}
	}
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return "full"
	case errors.Is(err, syscall.EROFS):
		return "readonly"
	case errors.Is(err, syscall.EIO):
		return "io"
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
	return &chat.Error{Code: chat.EUnavailable, Message: "the database cannot be written (" + kindText(kind) + "); retry later", RetryAfterMS: retryAfterMS}
}

func kindText(kind string) string {
	switch kind {
	case "full":
		return "disk full"
	case "readonly":
		return "read-only"
	default:
		return "I/O error"
	}
}

// health is whether writes succeed: set by the writer when a transaction
// fails for a storage reason, cleared by the next one that commits. It
// logs the two transitions only, not every failed write.
type health struct {
	log *slog.Logger

	mu     sync.Mutex
	since  time.Time // zero while writes succeed
	kind   string
	reason string
}

func (h *health) failed(kind string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.since.IsZero() {
		h.since = time.Now()
		h.log.Error("storage: writes are failing; answering 503 until one succeeds", "kind", kind, "err", err)
	}
	h.kind, h.reason = kind, err.Error()
}

func (h *health) succeeded() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.since.IsZero() {
		return
	}
	h.log.Info("storage: writes succeed again", "failed_for", time.Since(h.since).Round(time.Millisecond))
	h.since, h.kind, h.reason = time.Time{}, "", ""
}

// err describes the failure, nil while writes succeed.
func (h *health) err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.since.IsZero() {
		return nil
	}
	return fmt.Errorf("writes failing since %s (%s): %s", h.since.UTC().Format(time.RFC3339), kindText(h.kind), h.reason)
}

// WriteHealth implements chat.Store: nil while writes succeed, the
// unavailable error writes are answered with otherwise.
func (db *DB) WriteHealth() error {
	if err := db.w.health.err(); err != nil {
		return &chat.Error{Code: chat.EUnavailable, Message: "the database cannot be written; retry later", RetryAfterMS: retryAfterMS}
	}
	return nil
}
