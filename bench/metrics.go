package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// serverMetrics is one scrape of GET /metrics: metric name → value, summed
// over label sets (the figures the bench reads have none or want the sum).
type serverMetrics map[string]float64

// scrapeMetrics reads the Prometheus text exposition format.
func (a *apiClient) scrapeMetrics(ctx context.Context) (serverMetrics, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", a.base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	if a.metricsToken != "" {
		req.Header.Set("Authorization", "Bearer "+a.metricsToken)
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET /metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		return nil, fmt.Errorf("GET /metrics: status %d, body %s", resp.StatusCode, b)
	}
	return parseMetrics(resp.Body)
}

func parseMetrics(r io.Reader) (serverMetrics, error) {
	m := serverMetrics{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest := line, ""
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name, rest = line[:i], line[i:]
		}
		if strings.HasPrefix(rest, "{") {
			// Label values may hold spaces or braces inside quotes.
			end := labelsEnd(rest)
			if end < 0 {
				continue
			}
			rest = rest[end+1:]
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		m[name] += v
	}
	return m, sc.Err()
}

// labelsEnd returns the index of the '}' closing a label set that starts at s[0].
func labelsEnd(s string) int {
	inQuote := false
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' && inQuote:
			i++
		case c == '"':
			inQuote = !inQuote
		case c == '}' && !inQuote:
			return i
		}
	}
	return -1
}

// metricsAgree reports whether each named figure differs by at most tol
// across the readings. A figure absent from every reading agrees; one
// present in only some does not.
func metricsAgree(readings []serverMetrics, names []string, tol float64) bool {
	for _, name := range names {
		var lo, hi float64
		seen := 0
		for _, m := range readings {
			v, ok := m[name]
			if !ok {
				continue
			}
			if seen == 0 {
				lo, hi = v, v
			}
			lo, hi = min(lo, v), max(hi, v)
			seen++
		}
		if seen > 0 && (seen < len(readings) || hi-lo > tol) {
			return false
		}
	}
	return true
}
