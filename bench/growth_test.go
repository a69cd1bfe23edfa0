package bench

import (
	"reflect"
	"testing"
)

// TestMedianRow: a size measured in rounds reports each figure's median,
// the worst startup of all and every round's errors.
func TestMedianRow(t *testing.T) {
	rounds := []GrowthRow{
		{Messages: 10, SendsPerSec: 30, HistoryAppendsPerSec: 9, DeliverP99ms: 5, CatchupSec: 0.3, StartupSec: 0.1, StartupMax: 0.2, IdleRSS: 3, ListSec: 1, ListColdSec: 2, SearchMs: 7, SearchP99ms: 70},
		{Messages: 10, SendsPerSec: 10, HistoryAppendsPerSec: 7, DeliverP99ms: 50, CatchupSec: 0.1, StartupSec: 0.3, StartupMax: 0.9, IdleRSS: 1, ListSec: 3, ListColdSec: 6, SearchMs: 5, SearchP99ms: 50, Errors: []string{"send: x"}},
		{Messages: 10, SendsPerSec: 20, HistoryAppendsPerSec: 8, DeliverP99ms: 9, CatchupSec: 0.2, StartupSec: 0.2, StartupMax: 0.3, IdleRSS: 2, ListSec: 2, ListColdSec: 4, SearchMs: 6, SearchP99ms: 90},
	}
	want := GrowthRow{Messages: 10, SendsPerSec: 20, HistoryAppendsPerSec: 8, DeliverP99ms: 9, CatchupSec: 0.2, StartupSec: 0.2, StartupMax: 0.9, IdleRSS: 2, ListSec: 2, ListColdSec: 4, SearchMs: 6, SearchP99ms: 70, Errors: []string{"send: x"}}
	if got := medianRow(rounds); !reflect.DeepEqual(got, want) {
		t.Fatalf("medianRow:\n got %+v\nwant %+v", got, want)
	}
}
