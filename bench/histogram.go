package bench

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// histogram records durations in microseconds with about 3% precision in
// fixed memory, safe for concurrent use: millions of deliveries cannot be kept
// one by one. Values below 64µs are exact; above, each power of two is split
// into 32 buckets.
type histogram struct {
	buckets [histBuckets]atomic.Int64
	count   atomic.Int64
	sum     atomic.Int64 // µs
	max     atomic.Int64 // µs
}

const histBuckets = 64 + 58*32

func histIndex(us int64) int {
	if us < 64 {
		if us < 0 {
			return 0
		}
		return int(us)
	}
	e := bits.Len64(uint64(us)) - 6 // us>>e lies in [32, 64)
	i := 64 + (e-1)*32 + int(us>>e) - 32
	if i >= histBuckets {
		return histBuckets - 1
	}
	return i
}

// histValue is the middle of bucket i, in µs.
func histValue(i int) int64 {
	if i < 64 {
		return int64(i)
	}
	e := (i-64)/32 + 1
	m := int64((i-64)%32 + 32)
	lo := m << e
	return lo + (int64(1)<<e)/2
}

func (h *histogram) record(d time.Duration) {
	us := d.Microseconds()
	h.buckets[histIndex(us)].Add(1)
	h.count.Add(1)
	h.sum.Add(us)
	for {
		m := h.max.Load()
		if us <= m || h.max.CompareAndSwap(m, us) {
			return
		}
	}
}

// Latency summarises a histogram, in milliseconds.
type Latency struct {
	Count int64   `json:"count"`
	Mean  float64 `json:"mean_ms"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
}

func (h *histogram) summary() Latency {
	n := h.count.Load()
	if n == 0 {
		return Latency{}
	}
	l := Latency{Count: n, Mean: float64(h.sum.Load()) / float64(n) / 1000, Max: float64(h.max.Load()) / 1000}
	l.P50 = h.quantile(0.50, n)
	l.P90 = h.quantile(0.90, n)
	l.P99 = h.quantile(0.99, n)
	return l
}

func (h *histogram) quantile(q float64, n int64) float64 {
	rank := int64(q*float64(n) + 0.5)
	if rank < 1 {
		rank = 1
	}
	var seen int64
	for i := range h.buckets {
		seen += h.buckets[i].Load()
		if seen >= rank {
			v := float64(histValue(i)) / 1000
			if m := float64(h.max.Load()) / 1000; v > m {
				return m
			}
			return v
		}
	}
	return float64(h.max.Load()) / 1000
}
