package backup

import (
	"fmt"
	"io"
	"time"
)

// progress writes "label: 12.3 MiB of 100.0 MiB (12%)" lines, at most a
// few a second, to a terminal.
type progress struct {
	w     io.Writer
	label string
	total int64
	n     int64
	last  time.Time
}

func newProgress(w io.Writer, label string, total int64) *progress {
	return &progress{w: w, label: label, total: total}
}

func (p *progress) Write(b []byte) (int, error) {
	p.n += int64(len(b))
	if p.w != nil && time.Since(p.last) > 200*time.Millisecond {
		p.last = time.Now()
		p.print()
	}
	return len(b), nil
}

func (p *progress) print() {
	pct := 100.0
	if p.total > 0 {
		pct = min(100, float64(p.n)*100/float64(p.total))
	}
	fmt.Fprintf(p.w, "\r%s: %.1f MiB of %.1f MiB (%.0f%%)   ", p.label, float64(p.n)/(1<<20), float64(p.total)/(1<<20), pct)
}

func (p *progress) done() {
	if p.w != nil {
		p.print()
		fmt.Fprintln(p.w)
	}
}
