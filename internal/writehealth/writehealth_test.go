package writehealth

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestHealth: a failure is reported with its kind until a write succeeds;
// Recent stops reporting it once the latest failure is older than asked,
// and a new failure reports it again.
func TestHealth(t *testing.T) {
	var h Health
	if h.Err() != nil {
		t.Fatal("a new state reports a failure")
	}
	// The failed write's error stays out of what /healthz shows: a
	// driver's may name the database's host and user.
	h.Failed(Full, errors.New("no space at db.internal user=imserver"))
	if err := h.Err(); err == nil || !strings.HasSuffix(err.Error(), ": disk full") || strings.Contains(err.Error(), "db.internal") {
		t.Fatalf("after a failure: %v", err)
	}
	time.Sleep(20 * time.Millisecond)
	if err := h.Recent(10 * time.Millisecond); err != nil {
		t.Fatalf("Recent after the failure aged: %v", err)
	}
	if h.Err() == nil {
		t.Fatal("Err forgot a failure no write cleared")
	}
	h.Failed(ReadOnly, errors.New("standby"))
	if err := h.Recent(10 * time.Millisecond); err == nil || !strings.HasSuffix(err.Error(), ": read-only") {
		t.Fatalf("Recent after a new failure: %v", err)
	}
	h.Succeeded()
	if h.Err() != nil || h.Recent(0) != nil {
		t.Fatal("a failure outlived a successful write")
	}
}
