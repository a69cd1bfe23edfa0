package storage

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/imserver/imserver/chat"
	"github.com/imserver/imserver/internal/batch"
	"github.com/imserver/imserver/internal/writehealth"
	"modernc.org/sqlite"
)

// writer owns the only write connection. It takes whatever jobs are queued
// (up to BatchSize, waiting BatchDelay at most), runs them in one BEGIN
// IMMEDIATE transaction, adds to it the jobs queued meanwhile (up to
// BatchSize in all) and commits once: one fsync for the batch.
type writer struct {
	conn  *sql.Conn // held for the writer's life, used through Raw (wtx.go)
	dc    any       // the driver connection under conn
	stmts map[string]*wstmt
	// insertArgs is reused by every insert of a message.
	insertArgs [10]driver.NamedValue
	ftsArgs    [2]driver.NamedValue
	// finishArgs is reused by finishMessages.
	finishArgs []any

	seqs seqSource
	keys *keyCache  // text ids <-> integer keys (keys.go)
	mem  *memLevel  // the dedup level in memory (dedup_mem.go)
	live *liveTexts // seqs known to hold live text messages (live.go)
	// members holds senders' member rows as committed (member_rows.go).
	members *memberRows
	// muts holds the conversations' mutation counts as committed, by key
	// (muts.go).
	muts map[int64]int64
	// dataVersion is PRAGMA data_version as the last transaction found it
	// (syncOthers, live.go).
	dataVersion int64
	// filters rule out keys of the dedup levels on file (dedup_filter.go).
	filters filters
	ckpt    *checkpointer
	opts    Options
	health  writehealth.Health
	sync    *syncer // nil when COMMIT syncs (syncer.go)
	// Totals for benchmarks: commits and WAL pages they wrote.
	commits, walPages atomic.Int64
	links             *linker // signs the attachments of messages it commits
	// indexed is set once the background indexing of older messages has
	// finished (search_backfill.go): no transaction need read its progress.
	indexed atomic.Bool

	queue *batch.Queue[*job]
}

// job is a message to append (fn nil) or a function to run in the
// transaction.
type job struct {
	msg chat.Message
	fn  func(*wtx) error
	// keepsMembers is set on a function job that changes no member's
	// visible range or role, no conversation's roster version and no key
	// (execKeepingMembers): the writer's member rows stay valid.
	keepsMembers bool
	res          chan result
	// notify, when set, is called with the outcome instead of res
	// (notify.go).
	notify func(chat.Message, bool, error)

	// Set by the writer while it runs the job.
	r      result
	conv   *convTx   // msg's conversation
	sender *senderTx // msg's (conversation, sender)
}

type result struct {
	msg chat.Message
	dup bool
	err error
}

var errClosed = chat.Errorf(chat.EUnavailable, "the server is shutting down")

func newWriter(ctx context.Context, db *sql.DB, seqs seqSource, keys *keyCache, mem *memLevel, ckpt *checkpointer, opts Options) (*writer, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	// The writer's statement journals (a function job's savepoint, a
	// multi-row statement), which hold what pages were before an erasing
	// statement, stay in memory instead of a temporary file on disk. Not
	// for the migrations, run before on this connection: a copy
	// migration's DROP TABLE journals the whole table.
	if _, err := conn.ExecContext(ctx, `PRAGMA temp_store = MEMORY`); err != nil {
		conn.Close()
		return nil, err
	}
	if err := enableQPSG(conn); err != nil {
		conn.Close()
		return nil, err
	}
	w := &writer{
		conn:    conn,
		stmts:   make(map[string]*wstmt),
		seqs:    seqs,
		keys:    keys,
		mem:     mem,
		live:    newLiveTexts(),
		members: newMemberRows(),
		muts:    make(map[int64]int64),
		ckpt:    ckpt,
		opts:    opts,
		queue:   batch.New[*job](opts.BatchSize, opts.BatchDelay, errClosed),
	}
	w.health.Log = opts.Logger
	mem.filters = &w.filters
	for i := range w.insertArgs {
		w.insertArgs[i].Ordinal = i + 1
	}
	for i := range w.ftsArgs {
		w.ftsArgs[i].Ordinal = i + 1
	}
	if err := w.startSyncer(ctx); err != nil {
		conn.Close()
		return nil, err
	}
	go w.queue.Run(w.run, w.stopped)
	return w, nil
}

// enqueue queues j; j.wait then waits for its result. The error says why
// j was not queued.
func (w *writer) enqueue(ctx context.Context, j *job) error {
	if j.notify == nil {
		j.res = make(chan result, 1)
	}
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
	return w.execJob(ctx, &job{fn: fn})
}

// execKeepingMembers is exec for a function that changes no member's
// visible range or role, no conversation's roster version and no key
// (member_rows.go): a read marker, acks, the dedup and search jobs.
func (w *writer) execKeepingMembers(ctx context.Context, fn func(*wtx) error) error {
	return w.execJob(ctx, &job{fn: fn, keepsMembers: true})
}

func (w *writer) execJob(ctx context.Context, j *job) error {
	if err := w.enqueue(ctx, j); err != nil {
		return err
	}
	return j.wait(ctx).err
}

// close lets the queued jobs finish, then stops the writer.
func (w *writer) close() { w.queue.Close() }

// stopped runs once the last batch is answered: the syncer answers what
// it holds, then the connection closes.
func (w *writer) stopped() {
	if w.sync != nil {
		w.sync.close()
	}
	w.closeConn()
}

// raw runs f on the writer's driver connection.
func (w *writer) raw(f func(driverConn) error) error {
	var ferr error
	err := w.conn.Raw(func(c any) error {
		dc, ok := c.(driverConn)
		if !ok {
			ferr = fmt.Errorf("storage: the sqlite driver's connection (%T) lacks a method the writer needs", c)
			return nil
		}
		if c != w.dc {
			// Not expected (conn keeps its driver connection), but
			// statements belong to the connection they were prepared on.
			clear(w.stmts)
			w.dc = c
		}
		ferr = f(dc)
		// Whatever f returns, the connection is fine: an error returned
		// to Raw could make database/sql discard it.
		return nil
	})
	return errors.Join(err, ferr)
}

func (w *writer) closeConn() {
	w.raw(func(driverConn) error {
		for _, s := range w.stmts {
			s.ds.Close()
		}
		clear(w.stmts)
		return nil
	})
	w.conn.Close()
}

// run runs batch in one transaction and answers its jobs. Jobs queued
// while the transaction runs join it (up to BatchSize), so it returns
// the batch it ended with.
func (w *writer) run(batch []*job) []*job {
	start := time.Now()
	var t *wtx
	var frames int
	err := w.raw(func(dc driverConn) error {
		var err error
		t, batch, err = w.runTx(dc, batch)
		frames = pagesWritten(dc)
		return err
	})
	if err != nil {
		if t != nil {
			for _, c := range t.convs {
				if c.reserved {
					w.seqs.rollback(c.id)
				}
			}
		}
		if kind := failureKind(err); kind != "" {
			// A failing disk is the client's to retry (its client_msg_id
			// makes that safe) and the operator's to fix: no retry here.
			w.failed(kind, err)
			err = unavailable(err)
		} else if !errors.Is(err, context.Canceled) {
			err = fmt.Errorf("write batch: %w", err)
		}
		for _, j := range batch {
			j.r = result{err: err}
		}
		w.answer(batch, nil)
		return batch
	}
	// A function job rolled back alone for a storage reason means the disk
	// still fails, even though the transaction around it committed.
	failing := false
	for _, j := range batch {
		if kind := failureKind(j.r.err); kind != "" {
			w.failed(kind, j.r.err)
			j.r.err = unavailable(j.r.err)
			failing = true
		}
	}
	if !failing && frames > 0 {
		// Only a commit that wrote something proves that writes work.
		w.health.Succeeded()
	}
	if w.opts.Metrics != nil {
		w.opts.Metrics.Batch(len(batch), len(t.committed), time.Since(start))
	}
	w.keys.addAll(t.keys) // committed now
	w.mem.commit(&t.memTx)
	w.live.committed(t)
	w.members.committed(t)
	if len(w.muts) > mutsKept {
		clear(w.muts)
	}
	for _, c := range t.touched {
		w.muts[c.key] = c.muts
	}
	w.commits.Add(1)
	w.walPages.Add(int64(frames))
	// Freed attachment bytes go once the commit that freed them is in.
	w.filesFreed(t)
	w.durable(batch, t.committed)
	if w.ckpt.committed(frames) {
		w.ckpt.tail(func() error {
			return w.raw(func(dc driverConn) error {
				t := &wtx{w: w, dc: dc}
				_, _, err := checkpointed(t.QueryRowContext(context.Background(), checkpointSQL))
				return err
			})
		})
	}
	return batch
}

// failed records a transaction that failed for a storage reason.
func (w *writer) failed(kind string, err error) {
	w.health.Failed(kind, err)
	if m, ok := w.opts.Metrics.(WriteErrorMetrics); ok {
		m.WriteError(kind)
	}
}

// pagesWritten returns how many pages the connection wrote to the WAL
// since the last call.
func pagesWritten(dc driverConn) int {
	n, _, err := dc.Status(sqlite.DBStatusCacheWrite, true)
	if err != nil {
		return 1 // cannot happen for this op; still count the commit
	}
	return n
}

func (w *writer) runTx(dc driverConn, batch []*job) (*wtx, []*job, error) {
	ctx := context.Background()
	t := &wtx{
		w:       w,
		dc:      dc,
		ctx:     ctx,
		convs:   make(map[string]*convTx),
		senders: make(map[[2]string]*senderTx),
	}
	if _, err := dc.ExecContext(ctx, "BEGIN IMMEDIATE", nil); err != nil {
		return t, batch, err
	}
	if err := t.syncOthers(); err != nil {
		return t, batch, t.rollback(err)
	}
	// Rounds: the jobs queued while a round runs make the next one, until
	// none are waiting or the batch is full. A sender that queues while a
	// transaction is open thus shares its commit instead of waiting for
	// it and then for a commit of its own: larger batches, so fewer
	// commits, statements per conversation, WAL pages and fsyncs per
	// message. Queue order is kept, so is commit order.
	for done := 0; done < len(batch); {
		// Room for the round's messages at once: grown by append, the
		// slice of whole messages was copied over and over.
		msgs := 0
		for _, j := range batch[done:] {
			if j.fn == nil {
				msgs++
			}
		}
		t.committed = slices.Grow(t.committed, msgs)
		if err := w.runRound(t, batch[done:], done); err != nil {
			return t, batch, t.rollback(err)
		}
		done = len(batch)
		batch = w.moreWhileSyncing(batch)
	}
	if err := w.applyFTS(t); err != nil {
		return t, batch, t.rollback(err)
	}
	if err := w.finishMessages(t); err != nil {
		return t, batch, t.rollback(err)
	}
	w.settle(t)
	if m := &t.memTx; m.last > m.hi {
		st, err := t.stmt(`UPDATE counters SET value = ? WHERE name = 'messages_hi'`)
		if err == nil {
			_, err = st.ExecContext(ctx, m.last)
		}
		if err != nil {
			return t, batch, t.rollback(err)
		}
	}
	if t.version != 0 {
		st, err := t.stmt(`UPDATE counters SET value = ? WHERE name = 'version'`)
		if err == nil {
			_, err = st.ExecContext(ctx, t.version)
		}
		if err != nil {
			return t, batch, t.rollback(err)
		}
	}
	if _, err := dc.ExecContext(ctx, "COMMIT", nil); err != nil {
		// A COMMIT that fails may leave the transaction open.
		return t, batch, t.rollback(err)
	}
	return t, batch, nil
}

// rollback ends the transaction after err, which it returns. The ROLLBACK
// fails harmlessly when SQLite already rolled back.
func (t *wtx) rollback(err error) error {
	t.dc.ExecContext(t.ctx, "ROLLBACK", nil)
	return err
}

// runRound runs the jobs of one round; offset is the index of its first
// job in the batch.
func (w *writer) runRound(t *wtx, round []*job, offset int) error {
	// Messages are reserved and checked a run at a time: a function job
	// between two runs may change membership or visible ranges.
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
		if err := w.reserve(t, round[start:end]); err != nil {
			return err
		}
		for _, j := range round[start:end] {
			if err := w.appendMessage(t, j); err != nil {
				return err
			}
		}
		start = end
	}
	return nil
}

// runFunc runs function job j, the i-th of the batch.
func (w *writer) runFunc(t *wtx, j *job, i int) error {
	if err := w.beforeFunc(t, j); err != nil {
		return err
	}
	// A function job that fails is rolled back alone; the rest of the
	// batch still commits.
	sp := "j" + strconv.Itoa(i)
	if _, err := t.ExecContext(t.ctx, "SAVEPOINT "+sp); err != nil {
		return err
	}
	// The index writes the job queued (retention's) are made inside its
	// savepoint, or dropped with it: beforeFunc left none pending; so are
	// its changes to the dedup level in memory.
	undo := len(t.memTx.undo)
	ferr := j.fn(t)
	if ferr == nil {
		ferr = w.applyFTS(t)
	}
	if ferr != nil {
		clear(t.fts)
		t.memTx.rollbackTo(undo)
		if _, err := t.ExecContext(t.ctx, "ROLLBACK TO "+sp); err != nil {
			return err
		}
		j.r = result{err: ferr}
	}
	_, err := t.ExecContext(t.ctx, "RELEASE "+sp)
	return err
}

// settle tells the allocator how far each conversation's reservation was
// used (duplicates leave its tail unused).
func (w *writer) settle(t *wtx) {
	for _, c := range t.convs {
		if c.reserved && c.r.err == nil {
			w.seqs.settle(c.id, c.r.end, c.r.next-1)
		}
	}
}

// reserve takes the seqs a round's messages may need, one call per
// conversation. A conversation whose reservation fails (Redis down) fails
// its messages of the round alone.
func (w *writer) reserve(t *wtx, round []*job) error {
	var convs []*convTx
	for _, j := range round {
		if j.fn != nil {
			continue
		}
		c := t.convs[j.msg.Conv]
		if c == nil {
			c = &convTx{id: j.msg.Conv}
			t.convs[c.id] = c
		}
		if c.n == 0 {
			convs = append(convs, c)
		}
		c.n++
		j.conv = c
		k := [2]string{j.msg.Conv, j.msg.From}
		s := t.senders[k]
		if s == nil {
			s = &senderTx{conv: k[0], user: k[1]}
			t.senders[k] = s
		}
		j.sender = s
	}
	// Membership was checked against a cache before the message was
	// queued; the transaction decides, so that a kick committed meanwhile
	// (here or by another process) is never overtaken by a send.
	for _, j := range round {
		s := j.sender
		if s == nil || s.checked {
			continue
		}
		if w.members.use(s) {
			s.checked, s.member = true, true
			j.conv.key = s.convKey
			continue
		}
		// The row's visible range and role come with it: a mutation or a
		// reply needs them, and a second look-up would cost as much.
		// So does the count of member changes its messages carry.
		member, err := t.stmt(`SELECT m.min_seq, m.role, c.roster_v FROM members m JOIN conversations c ON c.id = m.conv_id
			WHERE m.conv_id = ? AND m.user_id = ? AND m.max_seq IS NULL`)
		if err != nil {
			return err
		}
		err = member.QueryRowContext(t.ctx, s.conv, s.user).Scan(&s.minSeq, &s.role, &s.rosterV)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		s.checked, s.member = true, err == nil
		if !s.member {
			continue
		}
		// Keys are made for members' messages only, so a stranger's
		// sends cannot fill the ids table.
		if s.convKey, err = t.key(s.conv, true); err != nil {
			return err
		}
		if s.userKey, err = t.key(s.user, true); err != nil {
			return err
		}
		j.conv.key = s.convKey
		t.memberReads = append(t.memberReads, s)
	}
	for _, c := range convs {
		n := c.n
		c.n = 0
		if c.reserved && c.r.err == nil {
			// What an earlier round left unused goes back first, so that
			// the in-process allocator stays gapless.
			w.seqs.settle(c.id, c.r.end, c.r.next-1)
		}
		c.reserved = true
		first, err := w.seqs.reserve(t, c.id, n)
		if err != nil {
			var e *chat.Error
			if !errors.As(err, &e) && !errors.Is(err, sql.ErrNoRows) {
				return err
			}
			if errors.Is(err, sql.ErrNoRows) {
				err = chat.Errorf(chat.ENotFound, "conversation not found")
			}
			c.r = seqRange{err: err}
			continue
		}
		c.r = seqRange{next: first, end: first + n - 1}
	}
	return nil
}
