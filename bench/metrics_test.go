package bench

import (
	"strings"
	"testing"
)

func TestParseMetrics(t *testing.T) {
	in := `# HELP process_resident_memory_bytes Resident memory size in bytes.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 2.4576e+07
imserver_sessions 12
go_info{version="go1.26 {x}"} 1
http_requests_total{code="200",path="/a b"} 3
http_requests_total{code="500"} 2 1700000000000
`
	m, err := parseMetrics(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]float64{
		"process_resident_memory_bytes": 24576000, "imserver_sessions": 12, "go_info": 1, "http_requests_total": 5,
	} {
		if got := m[name]; got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}
