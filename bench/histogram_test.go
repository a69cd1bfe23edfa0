package bench

import (
	"math"
	"testing"
	"time"
)

func TestHistogramQuantiles(t *testing.T) {
	var h histogram
	for i := 1; i <= 1000; i++ {
		h.record(time.Duration(i) * time.Millisecond)
	}
	s := h.summary()
	for _, c := range []struct {
		name      string
		got, want float64
	}{{"p50", s.P50, 500}, {"p90", s.P90, 900}, {"p99", s.P99, 990}, {"max", s.Max, 1000}} {
		if math.Abs(c.got-c.want)/c.want > 0.04 {
			t.Errorf("%s = %v ms, want %v ±4%%", c.name, c.got, c.want)
		}
	}
	if s.Count != 1000 {
		t.Errorf("count = %d, want 1000", s.Count)
	}
}

func TestHistIndexMonotonic(t *testing.T) {
	prev := -1
	for us := int64(0); us < 1<<22; us += 1 + us/100 {
		i := histIndex(us)
		if i < prev {
			t.Fatalf("histIndex(%d) = %d < %d", us, i, prev)
		}
		if v := histValue(i); us >= 64 && math.Abs(float64(v-us))/float64(us) > 0.04 {
			t.Fatalf("histValue(histIndex(%d)) = %d, off by more than 4%%", us, v)
		}
		prev = i
	}
}
