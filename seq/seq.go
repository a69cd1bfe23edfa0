// Package seq holds the counters imserver keeps per conversation: sequence
// allocators, sliding windows for storm detection and bounded event queues.
// Each has an in-process implementation and one backed by Redis; the rest of
// imserver sees only the interfaces declared here.
package seq

import "errors"

// ErrUnavailable is returned when the backing store (Redis) cannot be reached.
// Callers map it to the protocol's `unavailable` error.
var ErrUnavailable = errors.New("seq: backing store unavailable")
