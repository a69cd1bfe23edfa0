package bench

import (
	"fmt"
	"io"
	"os"
	"time"
)

// progress prints a live line with the current rates to stderr: rewritten in
// place on a terminal, one line every few seconds otherwise (logs, CI).
type progress struct {
	w     io.Writer
	tty   bool
	every time.Duration
	stop  chan struct{}
	done  chan struct{}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func startProgress(w io.Writer, r *run) *progress {
	p := &progress{w: w, tty: isTerminal(w), stop: make(chan struct{}), done: make(chan struct{})}
	p.every = 5 * time.Second
	if p.tty {
		p.every = 500 * time.Millisecond
	}
	go p.loop(r)
	return p
}

func (p *progress) loop(r *run) {
	defer close(p.done)
	t := time.NewTicker(p.every)
	defer t.Stop()
	start := time.Now()
	var lastSent, lastDeliv int64
	last := start
	for {
		select {
		case <-p.stop:
			if p.tty {
				fmt.Fprint(p.w, "\r\033[K")
			}
			return
		case now := <-t.C:
			sent, deliv := r.stats.confirmed.Load(), r.stats.liveDeliveries.Load()
			dt := now.Sub(last).Seconds()
			line := fmt.Sprintf("%-8s %5.1fs  %-36s sent %s (%s/s)  delivered %s (%s/s)  p99 %s  pulled %s  resync %d  errors %d",
				r.name, now.Sub(start).Seconds(), r.getPhase(),
				si(float64(sent)), si(float64(sent-lastSent)/dt),
				si(float64(deliv)), si(float64(deliv-lastDeliv)/dt),
				p99(r), si(float64(r.stats.viaPull.Load())),
				r.stats.resyncs.Load(), r.sendErrorCount()+int(r.stats.disconnects.Load()))
			lastSent, lastDeliv, last = sent, deliv, now
			if p.tty {
				fmt.Fprint(p.w, "\r\033[K"+line)
			} else {
				fmt.Fprintln(p.w, line)
			}
		}
	}
}

func (p *progress) close() {
	close(p.stop)
	<-p.done
}

func p99(r *run) string {
	l := r.latency.summary()
	if l.Count == 0 {
		return "-"
	}
	return ms(l.P99) + "ms"
}
