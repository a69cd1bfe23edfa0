package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/imserver/imserver/chat"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// writer is the node's only writer. It takes whatever jobs are queued (up
// to BatchSize, waiting BatchDelay at most), runs them in one transaction,
// adds to it the jobs queued meanwhile and commits once. Its semantics are
// those of storage/writer.go: a function job that fails is rolled back
// alone (SAVEPOINT), membership and visible ranges are checked inside the
// transaction, and committed messages go to OnCommit in seq order.
//
// Each transaction starts by locking the version counter's row (FOR
// UPDATE), so the write transactions of all nodes are serialised: versions
// and seqs become visible in the order they were handed out, and no lock is
// ever taken before that one, so writers of different nodes cannot deadlock.
type writer struct {
	pool *pgxpool.Pool
	seqs seqSource
	opts Options

	jobs chan *job
	mu   sync.RWMutex // guards closed against enqueue
	quit chan struct{}
	done chan struct{}

	closed bool
}

// job is a message to append (fn nil) or a function to run in the
// transaction.
type job struct {
	msg chat.Message
	fn  func(*wtx) error
	res chan result
	r   result
}

type result struct {
	msg chat.Message
	dup bool
	err error
}

var errClosed = chat.Errorf(chat.EUnavailable, "the server is shutting down")

func newWriter(pool *pgxpool.Pool, seqs seqSource, opts Options) *writer {
	w := &writer{
		pool: pool,
		seqs: seqs,
		opts: opts,
		jobs: make(chan *job, 4*opts.BatchSize),
		quit: make(chan struct{}),
		done: make(chan struct{}),
	}
	go w.loop()
	return w
}

func (w *writer) enqueue(ctx context.Context, j *job) error {
	j.res = make(chan result, 1)
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		return errClosed
	}
	select {
	case w.jobs <- j:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// wait waits for the result of a queued job. The job may still commit
// after ctx ends; only the wait is given up.
func (j *job) wait(ctx context.Context) result {
	select {
	case r := <-j.res:
		return r
	case <-ctx.Done():
		return result{err: ctx.Err()}
	}
}

// exec runs fn in the writer's next transaction.
func (w *writer) exec(ctx context.Context, fn func(*wtx) error) error {
	j := &job{fn: fn}
	if err := w.enqueue(ctx, j); err != nil {
		return err
	}
	return j.wait(ctx).err
}

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
			batch = w.run(w.fill(append(batch[:0], j)))
		case <-w.quit:
			for {
				batch = w.fill(batch[:0])
				if len(batch) == 0 {
					return
				}
				batch = w.run(batch)
			}
		}
	}
}

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

func (w *writer) more(batch []*job) []*job {
	for len(batch) < w.opts.BatchSize {
		select {
		case j := <-w.jobs:
			batch = append(batch, j)
		default:
			return batch
		}
	}
	return batch
}

// run runs batch in one transaction and answers its jobs; it returns the
// batch it ended with (jobs queued meanwhile join it).
func (w *writer) run(batch []*job) []*job {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), w.opts.BatchTimeout)
	defer cancel()
	t, batch, err := w.runTx(ctx, batch)
	if err != nil {
		err = wrap(err)
		var ce *chat.Error
		if !errors.As(err, &ce) {
			err = fmt.Errorf("write batch: %w", err)
		}
		for _, j := range batch {
			j.res <- result{err: err}
		}
		return batch
	}
	if w.opts.Metrics != nil {
		w.opts.Metrics.Batch(len(batch), len(t.committed), time.Since(start))
	}
	if len(t.committed) > 0 {
		w.opts.OnCommit(t.committed)
	}
	for _, j := range batch {
		j.res <- j.r
	}
	return batch
}

func (w *writer) runTx(ctx context.Context, batch []*job) (*wtx, []*job, error) {
	conn, err := w.pool.Acquire(ctx)
	if err != nil {
		return nil, batch, err
	}
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, batch, err
	}
	t := &wtx{
		w:       w,
		tx:      tx,
		ctx:     ctx,
		convs:   make(map[string]*convTx),
		senders: make(map[[2]string]*senderTx),
	}
	fail := func(err error) (*wtx, []*job, error) {
		rctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if tx.Rollback(rctx) != nil {
			// The connection's state is unknown: do not give it back.
			conn.Conn().Close(rctx)
		}
		return t, batch, err
	}
	// The first lock of every write transaction, on every node (see the
	// type's comment).
	if err := tx.QueryRow(ctx, `SELECT value FROM counters WHERE name = 'version' FOR UPDATE`).Scan(&t.versionEnd); err != nil {
		return fail(err)
	}
	t.version = t.versionEnd
	for done := 0; done < len(batch); {
		if err := w.runRound(t, batch[done:], done); err != nil {
			return fail(err)
		}
		done = len(batch)
		batch = w.more(batch)
	}
	if err := w.finishMessages(t); err != nil {
		return fail(err)
	}
	if t.version != t.versionEnd {
		if _, err := tx.Exec(ctx, `UPDATE counters SET value = $1 WHERE name = 'version'`, t.version); err != nil {
			return fail(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		// Whether a COMMIT whose answer was lost took effect is unknown;
		// the jobs fail and clients retry, which dedup makes safe for
		// messages.
		conn.Conn().Close(context.Background())
		return t, batch, err
	}
	return t, batch, nil
}

// runRound runs the jobs of one round; offset is the index of its first
// job in the batch.
func (w *writer) runRound(t *wtx, round []*job, offset int) error {
	for start := 0; start < len(round); {
		if round[start].fn != nil {
			if err := w.runFunc(t, round[start], offset+start); err != nil {
				return err
			}
			start++
			continue
		}
		end := start + 1
		for end < len(round) && round[end].fn == nil {
			end++
		}
		if err := w.appendRun(t, round[start:end]); err != nil {
			return err
		}
		start = end
	}
	return nil
}

// runFunc runs function job j, the i-th of the batch, rolled back alone
// when it fails.
func (w *writer) runFunc(t *wtx, j *job, i int) error {
	if err := w.beforeFunc(t); err != nil {
		return err
	}
	sp := "j" + strconv.Itoa(i)
	if _, err := t.tx.Exec(t.ctx, "SAVEPOINT "+sp); err != nil {
		return err
	}
	if ferr := j.fn(t); ferr != nil {
		if !isStatementError(ferr) {
			// The connection failed, not the job: the whole batch fails.
			return ferr
		}
		if _, err := t.tx.Exec(t.ctx, "ROLLBACK TO SAVEPOINT "+sp); err != nil {
			return err
		}
		j.r = result{err: wrap(ferr)}
	}
	_, err := t.tx.Exec(t.ctx, "RELEASE SAVEPOINT "+sp)
	return err
}

// isStatementError tells an error of the job itself (a domain error, or
// an error the server answered for one statement) from a failure of the
// connection, after which the transaction cannot go on.
func isStatementError(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return wrap(err) == err
	}
	var ce *chat.Error
	if errors.As(err, &ce) {
		return true
	}
	return !pgconn.Timeout(err) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) && !errors.Is(err, pgx.ErrTxClosed) && !isConnError(err)
}

func isConnError(err error) bool {
	var ce *pgconn.ConnectError
	return errors.As(err, &ce) || pgconn.SafeToRetry(err)
}
