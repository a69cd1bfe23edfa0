// Package writehealth is whether a store's writes succeed, as both stores
// report it: set by the writer when a transaction fails for a condition of
// the machine or the database server (disk full, read-only, unreachable),
// cleared by the next one that commits. /healthz reads it (a server that
// can read but not write cannot take messages) and the two transitions are
// logged, not every failed write.
package writehealth

import (
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Kinds of failure. They are conditions an operator acts on, not bugs: the
// client retries and the write succeeds once the condition is gone.
const (
	Full        = "full"
	ReadOnly    = "readonly"
	IO          = "io"
	Unreachable = "unreachable"
)

// Text is how a kind reads in errors and /healthz.
func Text(kind string) string {
	switch kind {
	case Full:
		return "disk full"
	case ReadOnly:
		return "read-only"
	case Unreachable:
		return "database unreachable"
	default:
		return "I/O error"
	}
}

// Health is the state; its zero value (with Log set or nil) is healthy.
type Health struct {
	Log *slog.Logger // nil: no log lines

	mu    sync.Mutex
	since time.Time // zero while writes succeed
	last  time.Time // the latest failure
	kind  string
}

// Failed records a write that failed with err, a failure of kind.
func (h *Health) Failed(kind string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.since.IsZero() {
		h.since = time.Now()
		if h.Log != nil {
			h.Log.Error("storage: writes are failing; answering 503 until one succeeds", "kind", kind, "err", err)
		}
	}
	h.kind, h.last = kind, time.Now()
}

// Succeeded records a write that committed.
func (h *Health) Succeeded() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.since.IsZero() {
		return
	}
	if h.Log != nil {
		h.Log.Info("storage: writes succeed again", "failed_for", time.Since(h.since).Round(time.Millisecond))
	}
	h.since, h.kind = time.Time{}, ""
}

// Err describes the failure, nil while writes succeed.
func (h *Health) Err() error { return h.Recent(0) }

// Recent is Err, but nil once the latest failure is older than d (0: never
// too old): for a check that must not stay failed on a node no write
// reaches any more (a readiness probe took it out of service), while a
// failure that goes on keeps being refreshed by the writes that meet it.
func (h *Health) Recent(d time.Duration) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.since.IsZero() || (d > 0 && time.Since(h.last) > d) {
		return nil
	}
	// The kind, not the failed write's error: /healthz shows this to
	// anyone, and a driver's error may name the database's host, user and
	// database. The error itself is in the log (Failed).
	return fmt.Errorf("writes failing since %s: %s", h.since.UTC().Format(time.RFC3339), Text(h.kind))
}
