package storage

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// The dedup key (conv, sender, cmid_hash) -> seq lives in levels, smallest
// and newest first, as in a log-structured merge tree: level 0 in memory
// (dedup_mem.go), then the tables dedup_1 and dedup_2. A key is in one
// level, or in two with the same seq: while the compactor moves it out of
// memory, and in dedup_1 and dedup_2 when two processes sharing the file
// both moved it (the next move out of dedup_1 drops the copy).
//
// Why: a client_msg_id is random (a UUID), so with one index over every
// message each append wrote its entry to a random leaf of an index that
// grows with the history: at 10M messages about one page of its own per
// message, written to the WAL and copied back by the checkpoint, where
// appends into an empty database shared a few hot pages. Now an append
// puts its entry in memory and only reads the levels on file to prove the
// key absent. A background job moves a full level's entries into the
// next one in key order, a chunk per writer transaction: a chunk of keys
// in order lands on a run of neighbouring leaves of the next level, so a
// page written by a move takes many entries instead of one.
//
// PROTOCOL guarantee 3 holds whatever level an entry is in: a claim
// (claimRange) checks every level in the writer's transaction, and
// findDuplicate reads every level.

// dedupLevels is the number of levels, the one in memory included; the
// last has no bound.
const dedupLevels = 3

// dedupLimits[k] is how many entries level k may hold before the job
// moves them into level k+1. Level 0's bound keeps a start's reading of
// it short (its messages are read back) and a move's chunks in the key
// range of a few hundred pages of dedup_1; dedup_1's makes each move into
// the last level take about 20 entries per page it writes at 10M
// messages (the last level is then about 55,000 pages). Tests shrink them.
var dedupLimits = [dedupLevels - 1]int64{32768, 1 << 20}

// dedupChunk is how many entries one move transaction takes: a few
// milliseconds of the writer's time.
var dedupChunk = 4096

// dedupTick is how often the job looks at the levels' sizes.
var dedupTick = 250 * time.Millisecond

// moveMemAtClose is false in tests that close a store as a kill would
// leave it, with keys in the level in memory.
var moveMemAtClose = true

// dedupProbeSQL tells whether a level on file holds a key of (conv,
// sender) from ?3 to ?4.
const dedupProbeSQL = `SELECT EXISTS (SELECT 1 FROM dedup_1 WHERE conv = ?1 AND sender = ?2 AND cmid_hash BETWEEN ?3 AND ?4)
	OR EXISTS (SELECT 1 FROM dedup_2 WHERE conv = ?1 AND sender = ?2 AND cmid_hash BETWEEN ?3 AND ?4)`

// dedupFindSQL finds the message stored under a client_msg_id: the seqs
// of its slots in the levels on file and in memory (?8 to ?11, -1 for
// none), confirmed by the stored text.
const dedupFindSQL = `SELECT ` + messageColumns + ` FROM messages WHERE conv = ?1 AND seq IN (
		SELECT seq FROM dedup_1 WHERE conv = ?1 AND sender = ?2 AND cmid_hash IN (?3, ?4, ?5, ?6)
		UNION ALL SELECT seq FROM dedup_2 WHERE conv = ?1 AND sender = ?2 AND cmid_hash IN (?3, ?4, ?5, ?6)
		UNION ALL VALUES (?8), (?9), (?10), (?11))
	AND sender = ?2 AND client_msg_id = ?7`

// claimSlot takes slot h for seq; false when it is taken. The id is the
// message row's (the caller inserts it next). displaced tells that h is
// not the first slot of the client_msg_id's hash.
func claimSlot(t *wtx, conv, sender, h, seq int64, displaced bool) (id int64, ok bool, err error) {
	return claimRange(t, conv, sender, h, h, seq, displaced)
}

// claimFirst takes the first slot of cmid's hash for seq when every slot
// of the hash is free in every level; false otherwise, and the caller
// takes the slow path (findDuplicate, then insertSlots). Only the first
// slot free is not enough: retention gives back the slot of a message it
// deletes, and a client_msg_id with the same hash stored in the next slot
// would then be stored again instead of answered (PROTOCOL guarantee 3).
func claimFirst(t *wtx, conv, sender int64, cmid string, seq int64) (h, id int64, ok bool, err error) {
	h = cmidHash(cmid)
	hi := h + (cmidProbes - 1)
	if hi < h {
		return h, 0, false, nil // the slots wrap past the largest int64: the slow path
	}
	id, ok, err = claimRange(t, conv, sender, h, hi, seq, false)
	return h, id, ok, err
}

// claimRange takes slot lo for seq when every slot from lo to hi is free
// in every level, and returns the id of the message row to insert.
// displaced tells that lo is not the first slot of the client_msg_id's
// hash (memLevel.displaced).
func claimRange(t *wtx, conv, sender, lo, hi, seq int64, displaced bool) (int64, bool, error) {
	m, err := t.mem()
	if err != nil {
		return 0, false, err
	}
	// A key in a later slot matters only if it took that slot because
	// its hash is lo's (claimFirst): while no key in memory sits past the
	// first slot of its hash, a key there has a hash of its own, so is
	// another client_msg_id, and lo alone decides.
	last := lo
	if m.displaced || t.w.mem.displaced {
		last = hi
	}
	for h := lo; ; h++ {
		if _, ok := m.get(t.w.mem, dedupKey{conv, sender, h}); ok {
			return 0, false, nil
		}
		if h == last {
			break
		}
	}
	// The levels on file are read only when the filter cannot rule the
	// slots out (dedup_filter.go).
	if f := t.w.filters.ready.Load(); f == nil || f.mayHaveRange(conv, sender, lo, hi) {
		st, err := t.stmt(dedupProbeSQL)
		if err != nil {
			return 0, false, err
		}
		var taken bool
		if err := st.QueryRowContext(t.ctx, conv, sender, lo, hi).Scan(&taken); err != nil || taken {
			return 0, false, err
		}
	}
	id := m.nextID()
	m.put(dedupKey{conv, sender, lo}, seq, id)
	m.displaced = m.displaced || displaced
	return id, true, nil
}

// dedupUnclaim gives back slot h of (conv, sender), claimed in this
// transaction by a message that is refused after all (unstore).
func dedupUnclaim(t *wtx, conv, sender, h int64) error {
	m, err := t.mem()
	if err != nil {
		return err
	}
	m.drop(dedupKey{conv, sender, h})
	return nil
}

// memSlots returns the seqs the level in memory holds for slots, -1 for
// none (dedupFindSQL's ?8 to ?11).
func memSlots(t *wtx, conv, sender int64, slots [cmidProbes]int64) ([cmidProbes]int64, error) {
	var seqs [cmidProbes]int64
	m, err := t.mem()
	if err != nil {
		return seqs, err
	}
	for i, h := range slots {
		seqs[i] = -1
		if seq, ok := m.get(t.w.mem, dedupKey{conv, sender, h}); ok {
			seqs[i] = seq
		}
	}
	return seqs, nil
}

// dedupForget removes the dedup entries of conv's messages up to seq last
// (retention), from every level: a message that is gone no longer
// answers a retry.
func dedupForget(t *wtx, conv, last int64) error {
	m, err := t.mem()
	if err != nil {
		return err
	}
	rows, err := t.QueryContext(t.ctx, `SELECT sender, cmid_hash FROM messages WHERE conv = ?1 AND seq <= ?2 AND id > ?3`, conv, last, t.w.mem.mark)
	if err != nil {
		return err
	}
	var keys []dedupKey
	for rows.Next() {
		k := dedupKey{conv: conv}
		if err := rows.Scan(&k.sender, &k.hash); err != nil {
			rows.Close()
			return err
		}
		keys = append(keys, k)
	}
	if err := rows.Close(); err != nil {
		return err
	}
	for _, k := range keys {
		m.drop(k)
	}
	for _, table := range []string{"dedup_1", "dedup_2"} {
		q := `DELETE FROM ` + table + ` WHERE (conv, sender, cmid_hash) IN
			(SELECT conv, sender, cmid_hash FROM messages WHERE conv = ?1 AND seq <= ?2)`
		if _, err := t.ExecContext(t.ctx, q, conv, last); err != nil {
			return err
		}
	}
	return nil
}

// dedupKey is a position in a level's key order.
type dedupKey struct{ conv, sender, hash int64 }

// dedupBelowAll sorts before every key (keys are at least 1).
var dedupBelowAll = dedupKey{-1, -1, math.MinInt64}

// compactor is the job that moves full levels down.
type compactor struct {
	db   *DB
	log  *slog.Logger
	stop chan struct{}
	done chan struct{}
	// size1 is dedup_1's size as the job last counted it; the moves it
	// makes keep it current. Level 0 counts itself (memLevel.size).
	size1 atomic.Int64
	// counted is set once size1 was counted (the job's first look).
	counted atomic.Bool
	// moved counts the entries moved, for tests and benchmarks.
	moved atomic.Int64
}

func (db *DB) startCompactor() {
	c := &compactor{db: db, log: db.opts.Logger, stop: make(chan struct{}), done: make(chan struct{})}
	db.compactor = c
	go c.loop()
}

// SettleDedup waits until the background job has every dedup level
// within its bound. A bulk load (populate) appends faster than the job
// moves dedup_1 into dedup_2 beside it and leaves millions of entries
// behind (8.7M in a 10M history), which the next start then merges (7 s
// of the writer's time for that one) under whatever it measures; a history
// written over a year by a server whose job kept up has no such backlog.
func (db *DB) SettleDedup(ctx context.Context) error {
	c := db.compactor
	if c == nil {
		return nil
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !c.counted.Load() || c.size1.Load() >= dedupLimits[1] || db.w.mem.size.Load() >= dedupLimits[0] {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

// close stops the job and then moves what the level in memory holds, so
// that the next start reads nothing back: a start after a stop with a
// backlog (a burst the job had not moved yet) read and held every row of
// it, tens of MiB of page cache and map for 200k messages. A kill leaves
// the backlog to the next start, which reads it back (dedup_mem.go). Then
// it saves the key filter for the next start (migration 0012).
func (c *compactor) close() {
	close(c.stop)
	<-c.done
	if !moveMemAtClose {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if c.db.w.mem.size.Load() > 0 {
		if err := c.moveMem(ctx, 0); err != nil {
			c.log.Warn("dedup: moving the newest keys to the file at stop; the next start reads them back", "err", err)
			return
		}
	}
	if err := c.db.saveFilter(ctx); err != nil {
		c.log.Warn("dedup: saving the key filter at stop; the next start builds it again", "err", err)
	}
}

func (c *compactor) loop() {
	defer close(c.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-c.stop
		cancel()
	}()
	filterDone := make(chan struct{})
	go c.db.filterLoop(ctx, filterDone)
	defer func() { <-filterDone }()
	// dedup_1 is counted once.
	tick := time.NewTicker(dedupTick)
	defer tick.Stop()
	for {
		if !c.counted.Load() {
			n, err := c.count1(ctx)
			if err == nil {
				c.size1.Store(n)
				c.counted.Store(true)
			}
		}
		if c.counted.Load() {
			if err := c.pass(ctx); err != nil && ctx.Err() == nil {
				c.log.Warn("dedup: moving entries to the next level", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// count1 counts dedup_1.
func (c *compactor) count1(ctx context.Context) (int64, error) {
	var n int64
	err := c.db.readers.QueryRowContext(ctx, `SELECT COUNT(*) FROM dedup_1`).Scan(&n)
	return n, err
}

// pass moves every full level into the next, smallest level first.
func (c *compactor) pass(ctx context.Context) error {
	if c.db.w.mem.size.Load() >= dedupLimits[0] {
		if err := c.moveMem(ctx, dedupLimits[0]/2); err != nil {
			return err
		}
	}
	if c.size1.Load() >= dedupLimits[1] {
		return c.moveLevel1(ctx)
	}
	return nil
}

// moveMem moves level 0 (in memory) into dedup_1 until it holds about
// keep keys. It takes the entries the level holds now, sorts them by key
// and inserts them a chunk per transaction in key order: a chunk lands on
// a run of neighbouring leaves of dedup_1, so the pages a move writes are
// about the level's size, not one per key (chunks in id order, tried,
// touched a random leaf per key and fell behind the appends at 1M
// messages). A chunk's keys leave the level when its transaction commits
// (they are on file then, and in the filter); the mark rises past the
// taken entries' ids at the end, so that the next start reads none of
// them back. Stopped midway, the keys already moved stay in the level's
// read-back until the next move (the same seq in both: harmless).
//
// The values come from the level, not from the messages table: a message
// retention deleted meanwhile may leave its key in dedup_1, where it only
// sends a retry of that id to the slow path.
func (c *compactor) moveMem(ctx context.Context, keep int64) error {
	l := c.db.w.mem
	if l.size.Load() <= keep {
		return nil
	}
	var snap []memKeyed
	var upto int64
	if err := c.db.w.execKeepingMembers(ctx, func(t *wtx) error {
		// Synced first: what other processes moved has left the level
		// and is not moved again.
		if _, err := t.mem(); err != nil {
			return err
		}
		upto = l.seen
		snap = l.snapshot(upto)
		return nil
	}); err != nil {
		return err
	}
	slices.SortFunc(snap, func(a, b memKeyed) int {
		return cmp.Or(cmp.Compare(a.k.conv, b.k.conv), cmp.Compare(a.k.sender, b.k.sender), cmp.Compare(a.k.hash, b.k.hash))
	})
	chunk := max(dedupChunk, len(snap)/8)
	for len(snap) > 0 {
		part := snap[:min(chunk, len(snap))]
		snap = snap[len(part):]
		var n int64
		if err := c.db.w.execKeepingMembers(ctx, func(t *wtx) error {
			m, err := t.mem()
			if err != nil {
				return err
			}
			if n, err = insertKeys(t, part); err != nil {
				return err
			}
			m.moveOut(part)
			return nil
		}); err != nil {
			return err
		}
		c.moved.Add(n)
		c.size1.Add(n)
	}
	return c.db.w.execKeepingMembers(ctx, func(t *wtx) error {
		m, err := t.mem()
		if err != nil {
			return err
		}
		if _, err := t.ExecContext(t.ctx, `UPDATE counters SET value = MAX(value, ?) WHERE name = 'dedup_mark'`, upto); err != nil {
			return err
		}
		m.raiseTo(upto)
		return nil
	})
}

// moveRows is how many keys one statement of insertKeys inserts. With a
// statement per key, binding, stepping and resetting it were about a third
// of a move's CPU, and a move's chunk holds up a batch of sends
// (BENCHMARKS.md, "Session 11").
const moveRows = 64

// moveRowsSQL inserts moveRows keys into dedup_1.
var moveRowsSQL = `INSERT OR IGNORE INTO dedup_1 (conv, sender, cmid_hash, seq) VALUES (?, ?, ?, ?)` + strings.Repeat(`, (?, ?, ?, ?)`, moveRows-1)

// insertKeys inserts keys into dedup_1 and returns how many were not
// there yet.
func insertKeys(t *wtx, keys []memKeyed) (int64, error) {
	many, err := t.stmt(moveRowsSQL)
	if err != nil {
		return 0, err
	}
	one, err := t.stmt(`INSERT OR IGNORE INTO dedup_1 (conv, sender, cmid_hash, seq) VALUES (?, ?, ?, ?)`)
	if err != nil {
		return 0, err
	}
	args := make([]any, 0, 4*moveRows)
	var n int64
	for len(keys) > 0 {
		st, part := many, keys[:min(moveRows, len(keys))]
		if len(part) < moveRows {
			st, part = one, part[:1]
		}
		args = args[:0]
		for _, e := range part {
			args = append(args, e.k.conv, e.k.sender, e.k.hash, e.e.seq)
		}
		res, err := st.ExecContext(t.ctx, args...)
		if err != nil {
			return 0, err
		}
		a, err := res.RowsAffected()
		if err != nil {
			return 0, err
		}
		n += a
		keys = keys[len(part):]
	}
	return n, nil
}

// moveLevel1 moves dedup_1's entries into dedup_2, a chunk per
// transaction, in key order from the lowest; entries added behind the
// cursor meanwhile wait for the next pass. Under a full load the job's
// transactions wait behind batches of appends and dedup_1 outgrows its
// bound: bigger chunks then, so that the job keeps up (up to 8 times the
// chunk).
func (c *compactor) moveLevel1(ctx context.Context) error {
	const from, to = "dedup_1", "dedup_2"
	at := dedupBelowAll
	chunk := dedupChunk * int(min(8, max(1, c.size1.Load()/dedupLimits[1])))
	for {
		var n int64
		var last bool
		err := c.db.w.execKeepingMembers(ctx, func(t *wtx) error {
			var err error
			n, last, at, err = moveChunk(t, from, to, at, chunk)
			return err
		})
		if err != nil {
			return err
		}
		c.moved.Add(n)
		c.size1.Add(-n)
		// A long move of dedup_1 leaves the level in memory to no
		// one: it is kept to its bound between the chunks.
		if c.db.w.mem.size.Load() > dedupLimits[0] {
			if err := c.moveMem(ctx, dedupLimits[0]/2); err != nil {
				return err
			}
		}
		if last {
			// Retention deletes from the levels too: count again.
			if m, err := c.count1(ctx); err == nil {
				c.size1.Store(m)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
	}
}

// moveChunk moves the next chunk entries of from above at into to; last
// when it reached the end of from.
func moveChunk(t *wtx, from, to string, at dedupKey, chunk int) (n int64, last bool, end dedupKey, err error) {
	// The chunk ends at its chunk-th key, or at the end of the level.
	err = t.QueryRowContext(t.ctx, `SELECT conv, sender, cmid_hash FROM `+from+`
		WHERE (conv, sender, cmid_hash) > (?, ?, ?) ORDER BY conv, sender, cmid_hash LIMIT 1 OFFSET ?`,
		at.conv, at.sender, at.hash, chunk-1).Scan(&end.conv, &end.sender, &end.hash)
	if errors.Is(err, sql.ErrNoRows) {
		end, last, err = dedupKey{math.MaxInt64, math.MaxInt64, math.MaxInt64}, true, nil
	}
	if err != nil {
		return 0, false, at, err
	}
	// OR IGNORE: another process sharing the file may have moved a key
	// here already and then put it back into from by a move out of
	// memory of its own; the copy, with the same seq, is dropped.
	res, err := t.ExecContext(t.ctx, `INSERT OR IGNORE INTO `+to+` (conv, sender, cmid_hash, seq)
		SELECT conv, sender, cmid_hash, seq FROM `+from+`
		WHERE (conv, sender, cmid_hash) > (?1, ?2, ?3) AND (conv, sender, cmid_hash) <= (?4, ?5, ?6)
		ORDER BY conv, sender, cmid_hash`, at.conv, at.sender, at.hash, end.conv, end.sender, end.hash)
	if err != nil {
		return 0, false, at, err
	}
	if n, err = res.RowsAffected(); err != nil {
		return 0, false, at, err
	}
	if _, err := t.ExecContext(t.ctx, `DELETE FROM `+from+`
		WHERE (conv, sender, cmid_hash) > (?1, ?2, ?3) AND (conv, sender, cmid_hash) <= (?4, ?5, ?6)`,
		at.conv, at.sender, at.hash, end.conv, end.sender, end.hash); err != nil {
		return 0, false, at, err
	}
	return n, last, end, nil
}
