package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/imserver/imserver/chat"
)

// writer owns the only write connection. It takes whatever jobs are queued
// (up to BatchSize, waiting BatchDelay at most), runs them in one BEGIN
// IMMEDIATE transaction and commits once: one fsync for the batch.
type writer struct {
	db   *sql.DB
	seqs seqSource
	opts Options

	jobs chan *job
	mu   sync.RWMutex // guards closed against submit
	quit chan struct{}
	done chan struct{}

	closed bool
}

// job is a message to append or a function to run in the transaction.
type job struct {
	msg *chat.Message
	fn  func(*wtx) error
	res chan result
}

type result struct {
	msg chat.Message
	dup bool
	err error
}

var errClosed = chat.Errorf(chat.EUnavailable, "the server is shutting down")

func newWriter(db *sql.DB, seqs seqSource, opts Options) *writer {
	w := &writer{
		db:   db,
		seqs: seqs,
		opts: opts,
		jobs: make(chan *job, 4*opts.BatchSize),
		quit: make(chan struct{}),
		done: make(chan struct{}),
	}
	go w.loop()
	return w
}

// submit queues j and waits for its result.
func (w *writer) submit(ctx context.Context, j *job) result {
	return w.enqueue(ctx, j)()
}

// enqueue queues j and returns a function that waits for its result. The
// job may still commit after ctx ends; only the wait is given up.
func (w *writer) enqueue(ctx context.Context, j *job) func() result {
	j.res = make(chan result, 1)
	w.mu.RLock()
	if w.closed {
		w.mu.RUnlock()
		return func() result { return result{err: errClosed} }
	}
	select {
	case w.jobs <- j:
	case <-ctx.Done():
		w.mu.RUnlock()
		return func() result { return result{err: ctx.Err()} }
	}
	w.mu.RUnlock()
	return func() result {
		select {
		case r := <-j.res:
			return r
		case <-ctx.Done():
			return result{err: ctx.Err()}
		}
	}
}

// exec runs fn in the writer's next transaction.
func (w *writer) exec(ctx context.Context, fn func(*wtx) error) error {
	return w.submit(ctx, &job{fn: fn}).err
}

// close lets the queued jobs finish, then stops the writer.
func (w *writer) close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	w.mu.Unlock()
	close(w.quit)
	<-w.done
}

func (w *writer) loop() {
	defer close(w.done)
	batch := make([]*job, 0, w.opts.BatchSize)
	for {
		select {
		case j := <-w.jobs:
			batch = w.fill(append(batch[:0], j))
			w.run(batch)
		case <-w.quit:
			for {
				batch = w.fill(batch[:0])
				if len(batch) == 0 {
					return
				}
				w.run(batch)
			}
		}
	}
}

// fill adds queued jobs to batch up to the batch size, waiting up to
// BatchDelay for more when it is set.
func (w *writer) fill(batch []*job) []*job {
	var timeout <-chan time.Time
	if w.opts.BatchDelay > 0 {
		t := time.NewTimer(w.opts.BatchDelay)
		defer t.Stop()
		timeout = t.C
	}
	for len(batch) < w.opts.BatchSize {
		select {
		case j := <-w.jobs:
			batch = append(batch, j)
			continue
		default:
		}
		if timeout == nil {
			return batch
		}
		select {
		case j := <-w.jobs:
			batch = append(batch, j)
		case <-timeout:
			return batch
		}
	}
	return batch
}

// wtx is the writer's transaction with the state one batch shares.
type wtx struct {
	*sql.Tx
	ctx context.Context

	version    int64 // last version handed out, 0 until first use
	versionEnd int64 // value in the counters row at the start

	convMax   map[string]int64     // conv -> largest seq appended
	senderMax map[[2]string]int64  // (conv, sender) -> largest seq
	committed []chat.Message       // appended, in order
	results   map[*job]result      // per job
	ranges    map[string]*seqRange // seqs reserved per conversation
	notMember map[[2]string]bool   // (conv, sender) pairs that may not send
	stmts     map[string]*sql.Stmt // prepared per transaction
}

// nextVersion hands out the next value of the global version counter.
func (t *wtx) nextVersion() (int64, error) {
	if t.version == 0 {
		if err := t.QueryRowContext(t.ctx, `SELECT value FROM counters WHERE name = 'version'`).Scan(&t.versionEnd); err != nil {
			return 0, err
		}
		t.version = t.versionEnd
	}
	t.version++
	return t.version, nil
}

func (t *wtx) stmt(query string) (*sql.Stmt, error) {
	if s, ok := t.stmts[query]; ok {
		return s, nil
	}
	s, err := t.PrepareContext(t.ctx, query)
	if err != nil {
		return nil, err
	}
	t.stmts[query] = s
	return s, nil
}

func (w *writer) run(batch []*job) {
	start := time.Now()
	t, err := w.runTx(batch)
	if err != nil {
		for c := range t.ranges {
			w.seqs.rollback(c)
		}
		if !errors.Is(err, context.Canceled) {
			err = fmt.Errorf("write batch: %w", err)
		}
		for _, j := range batch {
			j.res <- result{err: err}
		}
		return
	}
	if w.opts.Metrics != nil {
		w.opts.Metrics.Batch(len(batch), len(t.committed), time.Since(start))
	}
	if len(t.committed) > 0 {
		w.opts.OnCommit(t.committed)
	}
	for _, j := range batch {
		j.res <- t.results[j]
	}
}

// reserve takes the seqs the batch's messages may need, one call per
// conversation. A conversation whose reservation fails (Redis down) fails
// its messages alone.
func (w *writer) reserve(t *wtx, batch []*job) error {
	counts := make(map[string]int64)
	senders := make(map[[2]string]bool)
	for _, j := range batch {
		if j.msg != nil {
			counts[j.msg.Conv]++
			senders[[2]string{j.msg.Conv, j.msg.From}] = true
		}
	}
	// Membership was checked against a cache before the message was
	// queued; the transaction decides, so that a kick committed meanwhile
	// (here or by another process) is never overtaken by a send.
	member, err := t.stmt(`SELECT COUNT(*) FROM members WHERE conv_id = ? AND user_id = ? AND max_seq IS NULL`)
	if err != nil {
		return err
	}
	for k := range senders {
		var n int
		if err := member.QueryRowContext(t.ctx, k[0], k[1]).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			t.notMember[k] = true
		}
	}
	for conv, n := range counts {
		first, err := w.seqs.reserve(t, conv, n)
		if err != nil {
			var e *chat.Error
			if !errors.As(err, &e) && !errors.Is(err, sql.ErrNoRows) {
				return err
			}
			if errors.Is(err, sql.ErrNoRows) {
				err = chat.Errorf(chat.ENotFound, "conversation not found")
			}
			t.ranges[conv] = &seqRange{err: err}
			continue
		}
		t.ranges[conv] = &seqRange{next: first, end: first + n - 1}
	}
	return nil
}

func (w *writer) runTx(batch []*job) (*wtx, error) {
	ctx := context.Background()
	t := &wtx{
		ctx:       ctx,
		convMax:   make(map[string]int64),
		senderMax: make(map[[2]string]int64),
		results:   make(map[*job]result, len(batch)),
		ranges:    make(map[string]*seqRange),
		notMember: make(map[[2]string]bool),
		stmts:     make(map[string]*sql.Stmt),
	}
	tx, err := w.db.BeginTx(ctx, nil)
	if err != nil {
		return t, err
	}
	t.Tx = tx
	defer func() {
		for _, s := range t.stmts {
			s.Close()
		}
	}()
	if err := w.reserve(t, batch); err != nil {
		tx.Rollback()
		return t, err
	}
	for i, j := range batch {
		if j.msg != nil {
			if err := w.appendMessage(t, j); err != nil {
				tx.Rollback()
				return t, err
			}
			continue
		}
		// A function job that fails is rolled back alone; the rest of the
		// batch still commits.
		sp := fmt.Sprintf("j%d", i)
		if _, err := tx.ExecContext(ctx, "SAVEPOINT "+sp); err != nil {
			tx.Rollback()
			return t, err
		}
		if ferr := j.fn(t); ferr != nil {
			if _, err := tx.ExecContext(ctx, "ROLLBACK TO "+sp); err != nil {
				tx.Rollback()
				return t, err
			}
			t.results[j] = result{err: ferr}
		}
		if _, err := tx.ExecContext(ctx, "RELEASE "+sp); err != nil {
			tx.Rollback()
			return t, err
		}
	}
	if err := w.finishMessages(t); err != nil {
		tx.Rollback()
		return t, err
	}
	for c, r := range t.ranges {
		if r.err == nil {
			w.seqs.settle(c, r.end, r.next-1)
		}
	}
	if t.version != 0 {
		if _, err := tx.ExecContext(ctx, `UPDATE counters SET value = ? WHERE name = 'version'`, t.version); err != nil {
			tx.Rollback()
			return t, err
		}
	}
	return t, tx.Commit()
}
