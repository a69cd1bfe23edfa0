// Package batch is the queue under each store's writer (group commit): the
// writer takes whatever jobs are queued, runs them in one transaction,
// adds to it the jobs queued meanwhile and commits once. SQLite's writer
// (storage) and PostgreSQL's (postgres) differ in what a batch does, not in
// how jobs are queued, taken and drained at shutdown: that part is here.
package batch

import (
	"context"
	"sync"
	"time"
)

// Queue holds the jobs waiting for the writer. Put may be called from any
// goroutine; everything else belongs to the writer's goroutine (Run and the
// run function it calls).
type Queue[J any] struct {
	jobs  chan J
	size  int
	delay time.Duration
	// closedErr is what Put answers once Close began.
	closedErr error
	// Split, when set, reports whether j must start a batch of its own
	// rather than join batch: it is then held (carried) for the next one,
	// which ends the batch. Set it before Run.
	Split func(batch []J, j J) bool

	mu     sync.RWMutex // guards closed against Put
	closed bool
	quit   chan struct{}
	done   chan struct{}

	carry   J
	carried bool
}

// New returns a queue whose batches hold at most size jobs; Fill waits up
// to delay for more (0: it takes only what is queued). Put answers
// closedErr once Close began.
func New[J any](size int, delay time.Duration, closedErr error) *Queue[J] {
	return &Queue[J]{
		jobs:      make(chan J, 4*size),
		size:      size,
		delay:     delay,
		closedErr: closedErr,
		quit:      make(chan struct{}),
		done:      make(chan struct{}),
	}
}

// Put queues j. The error says why j was not queued: the queue is closing,
// or ctx ended while the queue was full.
func (q *Queue[J]) Put(ctx context.Context, j J) error {
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.closed {
		return q.closedErr
	}
	select {
	case q.jobs <- j:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run calls run with each batch until Close, then with what is still
// queued until nothing is, then after (when not nil), and returns; Close
// returns after it. run returns the batch it ended with (it may have taken
// more jobs), whose slice the next batch reuses.
func (q *Queue[J]) Run(run func(batch []J) []J, after func()) {
	defer close(q.done)
	if after != nil {
		defer after()
	}
	batch := make([]J, 0, q.size)
	// Each batch's jobs are dropped from the slice once run is done with
	// them: reused as batch[:0], it kept the jobs of the largest batch so
	// far (and their messages) in the slots a smaller one left alone.
	do := func(b []J) {
		batch = run(b)
		clear(batch)
	}
	for {
		if j, ok := q.takeCarry(); ok {
			do(q.Fill(append(batch[:0], j)))
			continue
		}
		select {
		case j := <-q.jobs:
			do(q.Fill(append(batch[:0], j)))
		case <-q.quit:
			for {
				batch = batch[:0]
				if j, ok := q.takeCarry(); ok {
					batch = append(batch, j)
				}
				batch = q.Fill(batch)
				if len(batch) == 0 {
					return
				}
				do(batch)
			}
		}
	}
}

// Close stops Put, lets Run finish what is queued and waits for it.
func (q *Queue[J]) Close() {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	q.closed = true
	q.mu.Unlock()
	close(q.quit)
	<-q.done
}

// Fill adds queued jobs to batch up to the batch size, waiting up to the
// queue's delay for more when it has one.
func (q *Queue[J]) Fill(batch []J) []J {
	var timeout <-chan time.Time
	if q.delay > 0 {
		t := time.NewTimer(q.delay)
		defer t.Stop()
		timeout = t.C
	}
	for len(batch) < q.size && !q.carried {
		select {
		case j := <-q.jobs:
			batch = q.add(batch, j)
			continue
		default:
		}
		if timeout == nil {
			return batch
		}
		select {
		case j := <-q.jobs:
			batch = q.add(batch, j)
		case <-timeout:
			return batch
		}
	}
	return batch
}

// More adds the jobs queued meanwhile to batch, up to the batch size,
// without waiting.
func (q *Queue[J]) More(batch []J) []J {
	for len(batch) < q.size && !q.carried {
		select {
		case j := <-q.jobs:
			batch = q.add(batch, j)
		default:
			return batch
		}
	}
	return batch
}

// Take appends to into the queued jobs that keep accepts, without
// waiting, while into holds fewer than max; the first job keep refuses is
// held for the next batch and ends the take (queue order is kept).
func (q *Queue[J]) Take(into []J, max int, keep func(J) bool) []J {
	for len(into) < max && !q.carried {
		select {
		case j := <-q.jobs:
			if !keep(j) {
				q.hold(j)
				return into
			}
			into = append(into, j)
		default:
			return into
		}
	}
	return into
}

// Jobs is the queue's channel, for a writer that waits for a job and for
// something else at once; a job received from it is the caller's to run.
// It bypasses Split.
func (q *Queue[J]) Jobs() <-chan J { return q.jobs }

// add appends j to batch, unless Split says j starts the next batch.
func (q *Queue[J]) add(batch []J, j J) []J {
	if q.Split != nil && q.Split(batch, j) {
		q.hold(j)
		return batch
	}
	return append(batch, j)
}

func (q *Queue[J]) hold(j J) {
	q.carry, q.carried = j, true
}

func (q *Queue[J]) takeCarry() (J, bool) {
	j, ok := q.carry, q.carried
	var zero J
	q.carry, q.carried = zero, false
	return j, ok
}
