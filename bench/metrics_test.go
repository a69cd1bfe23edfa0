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

func TestMetricsAgree(t *testing.T) {
	names := []string{"rss", "heap"}
	for _, c := range []struct {
		name     string
		readings []serverMetrics
		want     bool
	}{
		{"within tol", []serverMetrics{{"rss": 100, "heap": 50}, {"rss": 110, "heap": 45}, {"rss": 105, "heap": 50}}, true},
		{"rss spread too wide", []serverMetrics{{"rss": 100, "heap": 50}, {"rss": 105, "heap": 50}, {"rss": 111, "heap": 50}}, false},
		{"heap falls", []serverMetrics{{"rss": 100, "heap": 70}, {"rss": 100, "heap": 50}}, false},
		{"absent everywhere", []serverMetrics{{"rss": 100}, {"rss": 101}}, true},
		{"absent once", []serverMetrics{{"rss": 100, "heap": 50}, {"rss": 100}}, false},
		{"one reading", []serverMetrics{{"rss": 100, "heap": 50}}, true},
	} {
		if got := metricsAgree(c.readings, names, 10); got != c.want {
			t.Errorf("%s: metricsAgree = %v, want %v", c.name, got, c.want)
		}
	}
}
