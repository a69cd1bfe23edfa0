package seq

import "sync"

// Local allocates seqs in process. The storage writer calls it inside its
// transaction, and calls Forget for every conversation of a batch that rolls
// back, so the counters move only with commits: seqs are gapless and, since
// they are reloaded from the store after a restart, never reused.
type Local struct {
	mu   sync.Mutex
	last map[string]int64
}

// maxLocalCounters bounds memory; past it the counters are reloaded lazily.
const maxLocalCounters = 200_000

// NewLocal returns an empty allocator.
func NewLocal() *Local { return &Local{last: make(map[string]int64)} }

// Next returns the first of n new seqs of conv. On first use of conv it
// calls load for the largest seq already used.
func (l *Local) Next(conv string, n int64, load func() (int64, error)) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	last, ok := l.last[conv]
	if !ok {
		var err error
		if last, err = load(); err != nil {
			return 0, err
		}
		if len(l.last) >= maxLocalCounters {
			l.last = make(map[string]int64)
		}
	}
	l.last[conv] = last + n
	return last + 1, nil
}

// Forget drops conv's counter so that the next Next reloads it.
func (l *Local) Forget(conv string) {
	l.mu.Lock()
	delete(l.last, conv)
	l.mu.Unlock()
}

// Return gives back the tail of a reservation that ended at end when only
// seqs up to used were stored (the rest were duplicates), so seqs stay
// gapless. It does nothing if conv moved on since.
func (l *Local) Return(conv string, end, used int64) {
	l.mu.Lock()
	if l.last[conv] == end {
		l.last[conv] = used
	}
	l.mu.Unlock()
}
