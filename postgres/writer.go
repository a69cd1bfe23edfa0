package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/imserver/imserver/chat"
	"github.com/imserver/imserver/internal/batch"
	"github.com/imserver/imserver/internal/writehealth"
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
// Versions and seqs must become visible in the order they were handed out
// (a client syncing "after V" never skips an entry that commits later with
// a smaller number). Seqs of a conversation are taken under its row's lock
// (FOR UPDATE, to COMMIT). Versions come from the cluster-wide counter row,
// whose lock is held to COMMIT: a transaction that takes versions after
// another commits after it. How long that lock is held bounds the writes of
// the whole cluster, so a batch of messages alone (the common case) takes
// it last, in the pipeline that commits (lockLast); a batch with function
// jobs, which may take any lock in any order, takes it first, as its first
// lock. Messages batches cannot wait on each other in a cycle (each locks
// its conversations' rows sorted, in one statement, then the counter). A
// messages batch and a function batch can: the messages batch holds a
// conversation row a function job wants, and waits for the counter the
// function batch holds. So a messages batch waits for the counter no longer
// than lockLastTimeout, below PostgreSQL's deadlock_timeout, and is then
// rerun (runTx): the function batch is not the one PostgreSQL aborts. (Its
// waits for rows are not bounded: behind other nodes' batches on busy
// conversations they are long and no cycle. A function batch that locks two
// conversations out of order while a messages batch holds one of them is
// left to the deadlock detector; the messages batch is rerun if it is the
// one aborted, else the function batch's jobs answer unavailable and are
// retried.)
type writer struct {
	pool *pgxpool.Pool
	seqs seqSource
	opts Options

	// health is whether batches commit (WriteHealth, Ping).
	health writehealth.Health
	// reruns counts the batches of messages rerun with the counter taken
	// first (runTx), for tests.
	reruns atomic.Int64

	queue *batch.Queue[*job] // messages and function jobs, never in one batch (splitKinds)
	// commitRT is how long the last messages batch's second round trip
	// (writes and COMMIT) took, to tell a first round trip that waited
	// for rows from one that did not; only the writer goroutine uses it.
	commitRT time.Duration
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
		pool:   pool,
		seqs:   seqs,
		opts:   opts,
		health: writehealth.Health{Log: opts.Logger},
		queue:  batch.New[*job](opts.BatchSize, opts.BatchDelay, errClosed),
	}
	w.queue.Split = splitKinds
	go w.queue.Run(w.run, nil)
	return w
}

func (w *writer) enqueue(ctx context.Context, j *job) error {
	j.res = make(chan result, 1)
	return w.queue.Put(ctx, j)
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

func (w *writer) close() { w.queue.Close() }

// splitKinds holds j for the next batch when j is a message and the batch
// holds function jobs or the other way round. Messages and function jobs
// never share a transaction: a batch with function jobs takes the counter
// first, and if it also locked conversation rows for messages it would
// wait, holding the counter, for rows other nodes' messages batches hold
// while they wait for the counter, a cycle each time (writer's type
// comment). Jobs still run in the queue's order.
func splitKinds(batch []*job, j *job) bool {
	return len(batch) > 0 && (batch[0].fn == nil) != (j.fn == nil)
}

// moreLocked takes, once a messages batch holds its conversations' rows
// after waiting for them (other nodes' batches into the same busy
// conversations), the messages queued meanwhile into those conversations:
// they cost one round trip more, not a transaction of their own behind the
// same wait. It stops at the first job that is not one (a function job, a
// message to another conversation, whose row would be locked out of
// order), which starts the next batch: the queue's order is kept.
func (w *writer) moreLocked(t *wtx, n int) []*job {
	return w.queue.Take(nil, w.opts.BatchSize-n, func(j *job) bool {
		return j.fn == nil && !isV11(j) && t.convs[j.msg.Conv] != nil
	})
}

// run runs batch in one transaction and answers its jobs; it returns the
// batch it ended with (jobs queued while the lock was awaited join it).
func (w *writer) run(batch []*job) []*job {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), w.opts.BatchTimeout)
	defer cancel()
	t, batch, err := w.runTx(ctx, batch)
	if err != nil {
		err = wrap(err)
		if kind := failureKind(err); kind != "" {
			w.health.Failed(kind, err)
			if m, ok := w.opts.Metrics.(WriteErrorMetrics); ok {
				m.WriteError(kind)
			}
		}
		var ce *chat.Error
		if !errors.As(err, &ce) {
			err = fmt.Errorf("write batch: %w", err)
		}
		for _, j := range batch {
			j.res <- result{err: err}
		}
		return batch
	}
	// A commit that stored nothing (only duplicates, or jobs that each
	// failed on their own) says nothing about the disk.
	wrote := len(t.committed) > 0
	for _, j := range batch {
		wrote = wrote || (j.fn != nil && j.r.err == nil)
	}
	if wrote {
		w.health.Succeeded()
	}
	if w.opts.Metrics != nil {
		w.opts.Metrics.Batch(len(batch), len(t.committed), time.Since(start))
	}
	if len(t.committed) > 0 {
		w.opts.OnCommit(t.committed)
	}
	w.filesFreed(t)
	for _, j := range batch {
		j.res <- j.r
	}
	return batch
}

// idleTxSQL bounds how long PostgreSQL lets the writer's transaction sit
// idle (between round trips) before it ends the session. Only a node that
// died or whose link was cut mid-batch reaches it; its row locks would
// otherwise block every other node's sends into those conversations until
// TCP gave up on the link (hours). It is above the longest wait inside a
// transaction (a Redis seq reservation, 2 s at most), and set per
// transaction, not per connection, so that other transactions of the pool
// (migrate-to-postgres reads SQLite for minutes between its statements)
// and poolers that refuse startup parameters are left alone.
const idleTxSQL = "SET LOCAL idle_in_transaction_session_timeout = 5000"

// lockLastTimeout bounds the wait for the counter of a batch that takes it
// last (SET LOCAL lock_timeout); it must stay below PostgreSQL's
// deadlock_timeout (1s by default) for the rerun, not the deadlock
// detector, to break a cycle with a batch that took the counter first.
const lockLastTimeout = 600 * time.Millisecond

// rerunBackoff is how long a messages batch that gave way waits before it
// runs again (runTx).
const rerunBackoff = 100 * time.Millisecond

func (w *writer) runTx(ctx context.Context, batch []*job) (*wtx, []*job, error) {
	if !onlyMessages(batch) {
		return w.runTxCounterFirst(ctx, batch)
	}
	t, batch, err := w.runTxLockLast(ctx, batch)
	if err == nil || !isLockWait(err) || ctx.Err() != nil {
		return t, batch, err
	}
	// A function batch held the counter too long, or a cycle with one
	// (see the type's comment). Rolled back, the batch runs again the same
	// way: mostly that was a long wait, and taking the counter first would
	// make this batch hold it while it waits for rows other nodes' batches
	// hold, which then time out in turn. Only a second failure takes the
	// order that cannot deadlock. Seqs from Redis of a failed attempt
	// become gaps.
	w.reruns.Add(1)
	// The transaction that waited for this batch's rows takes them first:
	// taken again at once, they could close the same cycle.
	select {
	case <-time.After(rerunBackoff):
	case <-ctx.Done():
		return t, batch, err
	}
	t, batch, err = w.runTxLockLast(ctx, batch)
	if err != nil && isLockWait(err) && ctx.Err() == nil {
		w.reruns.Add(1)
		return w.runTxCounterFirst(ctx, batch)
	}
	return t, batch, err
}

// onlyMessages reports whether batch may take the counter last: plain
// messages only. v1.1 messages (mutations, replies, mentions,
// attachments) run one at a time in runRound, like function jobs.
func onlyMessages(batch []*job) bool {
	for _, j := range batch {
		if j.fn != nil || isV11(j) {
			return false
		}
	}
	return true
}

// isLockWait tells a lock wait given up (lock_timeout) or a deadlock.
func isLockWait(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "55P03" || pe.Code == "40P01")
}

// begin acquires the writer's connection and readies a transaction on it;
// fail rolls it back and returns err.
func (w *writer) begin(ctx context.Context) (*wtx, func(error) error, func(), error) {
	pc, err := w.pool.Acquire(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	conn := pc.Conn()
	t := &wtx{
		w:       w,
		conn:    conn,
		ctx:     ctx,
		pending: &pgx.Batch{},
		convs:   make(map[string]*convTx),
		senders: make(map[[2]string]*senderTx),
	}
	fail := func(err error) error {
		rctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, rerr := conn.Exec(rctx, "ROLLBACK"); rerr != nil {
			// The connection's state is unknown: do not give it back.
			conn.Close(rctx)
		}
		return err
	}
	return t, fail, pc.Release, nil
}

// queueCommit queues COMMIT, checking that it committed.
func (t *wtx) queueCommit() {
	t.queue("COMMIT").Exec(func(ct pgconn.CommandTag) error {
		if ct.String() != "COMMIT" {
			return fmt.Errorf("the transaction was rolled back (%s)", ct)
		}
		return nil
	})
}

// runTxLockLast runs a batch of messages alone in two round trips: BEGIN
// and the reads (the conversations' rows locked, sorted, in one
// statement); then the writes, the counter and COMMIT, so that the
// counter's lock is held for one statement and the commit.
func (w *writer) runTxLockLast(ctx context.Context, batch []*job) (*wtx, []*job, error) {
	t, fail, release, err := w.begin(ctx)
	if err != nil {
		return nil, batch, err
	}
	defer release()
	t.lockLast = true
	t.queue("BEGIN")
	t.queue(idleTxSQL)
	// A batch of messages alone is one run; appendRun sends the reads and
	// queues the writes.
	start := time.Now()
	if err := w.appendRun(t, batch); err != nil {
		return nil, batch, fail(err)
	}
	// Far longer than a round trip: the rows were held by other nodes'
	// batches, and what was queued meanwhile would wait as long again.
	if time.Since(start) > 2*w.commitRT+10*time.Millisecond {
		if extra := w.moreLocked(t, len(batch)); len(extra) > 0 {
			// A second run: its reads follow the first run's INSERT in
			// the pipeline, so a retry of a message of the first run is
			// seen.
			batch = append(batch, extra...)
			if err := w.appendRun(t, extra); err != nil {
				return nil, batch, fail(err)
			}
		}
	}
	if err := w.finishMessages(t); err != nil {
		return nil, batch, fail(err)
	}
	t.queueCommit()
	start = time.Now()
	if err := t.flush(); err != nil {
		// As below: whether a lost COMMIT took effect is unknown.
		return nil, batch, fail(err)
	}
	w.commitRT = time.Since(start)
	return t, batch, nil
}

func (w *writer) runTxCounterFirst(ctx context.Context, batch []*job) (*wtx, []*job, error) {
	t, fail0, release, err := w.begin(ctx)
	if err != nil {
		return nil, batch, err
	}
	defer release()
	fail := func(err error) (*wtx, []*job, error) { return t, batch, fail0(err) }
	// The first lock of every write transaction, on every node (see the
	// type's comment). While other nodes hold it, this node's jobs queue
	// up; they join the batch once the lock is taken, so the busier the
	// cluster, the larger each node's batches.
	t.queue("BEGIN")
	t.queue(idleTxSQL)
	t.queue(`SELECT value FROM counters WHERE name = 'version' FOR UPDATE`).QueryRow(func(row pgx.Row) error {
		err := row.Scan(&t.versionEnd)
		t.version = t.versionEnd
		return err
	})
	if err := t.flush(); err != nil {
		return fail(err)
	}
	batch = w.queue.More(batch)
	if err := w.runRound(t, batch); err != nil {
		return fail(err)
	}
	// What runRound left queued (the last job's RELEASE, the messages'
	// INSERT) leaves with COMMIT: one round trip less under the lock.
	if err := w.finishMessages(t); err != nil {
		return fail(err)
	}
	if t.version != t.versionEnd {
		t.queue(`UPDATE counters SET value = $1 WHERE name = 'version'`, t.version)
	}
	t.queueCommit()
	if err := t.flush(); err != nil {
		// Whether a COMMIT whose answer was lost took effect is unknown;
		// the jobs fail and clients retry, which dedup makes safe for
		// messages.
		return fail(err)
	}
	return t, batch, nil
}

// runRound runs the jobs of the batch in order: runs of messages, and
// function jobs between them. Unlike the SQLite writer, jobs queued once
// the lock is held wait for the next transaction: other nodes wait for
// this one.
func (w *writer) runRound(t *wtx, round []*job) error {
	const offset = 0
	for start := 0; start < len(round); {
		if round[start].fn != nil {
			if err := w.runFunc(t, round[start], offset+start); err != nil {
				return err
			}
			start++
			continue
		}
		if isV11(round[start]) {
			if err := w.appendV11(t, round[start]); err != nil {
				return err
			}
			start++
			continue
		}
		end := start + 1
		for end < len(round) && round[end].fn == nil && !isV11(round[end]) {
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
	w.beforeFunc(t)
	// What is queued must not fail with the job's savepoint.
	if err := t.flush(); err != nil {
		return err
	}
	sp := "j" + strconv.Itoa(i)
	t.queue("SAVEPOINT " + sp)
	ferr := j.fn(t)
	if ferr == nil {
		t.queue("RELEASE SAVEPOINT " + sp)
		return nil
	}
	if !isStatementError(ferr) {
		// The connection failed, not the job: the whole batch fails.
		return ferr
	}
	j.r = result{err: wrap(ferr)}
	if t.pending.Len() > 0 {
		// The job failed before its first statement: the savepoint was
		// never sent (jobs do not queue, they run statements).
		t.pending = &pgx.Batch{}
		return nil
	}
	if _, err := t.conn.Exec(t.ctx, "ROLLBACK TO SAVEPOINT "+sp); err != nil {
		return err
	}
	t.queue("RELEASE SAVEPOINT " + sp)
	return nil
}

// isStatementError tells an error of the job itself (a domain error, or
// an error the server answered for one statement) from a failure of the
// connection, after which the transaction cannot go on.
func isStatementError(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		// Refused for the database's state (unavailable): the batch
		// fails. Refused for the job's data (a value PostgreSQL cannot
		// hold, bad_request) or for anything else: that job alone.
		return chat.ErrorCode(wrap(err)) != chat.EUnavailable
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
