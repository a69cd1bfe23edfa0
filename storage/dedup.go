package storage

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"math"
	"strconv"
	"sync/atomic"
	"time"
)

// The dedup key (conv, sender, cmid_hash) -> seq lives in levels, tables
// dedup_0 .. dedup_2 (migration 0010), smallest and newest first, as in a
// log-structured merge tree. A key is in exactly one level.
//
// Why: a client_msg_id is random (a UUID), so with one index over every
// message each append wrote its entry to a random leaf of an index that
// grows with the history: at 10M messages about one page of its own per
// message, written to the WAL and copied back by the checkpoint, where
// appends into an empty database shared a few hot pages. Now an append
// writes its entry into dedup_0, which stays small enough (dedupLimits)
// that a batch's entries share its pages, and only reads the bigger
// levels to prove the key absent. A background job moves a full level's entries into the
// next one in key order, a chunk per writer transaction: a chunk of keys
// in order lands on a run of neighbouring leaves of the next level, so a
// page written by a move takes many entries instead of one.
//
// PROTOCOL guarantee 3 holds whatever level an entry is in: the insert
// (dedupClaimSQL) checks every level in the writer's transaction, and
// findDuplicate reads every level.

// dedupLevels is the number of dedup tables; the last has no bound.
const dedupLevels = 3

// dedupLimits[k] is how many entries dedup_k may hold before the job
// moves them into dedup_k+1. dedup_0's bound keeps it to a few hundred
// pages, which a batch of appends shares; dedup_1's makes each move into
// the last level take about 20 entries per page it writes at 10M
// messages (the last level is then about 55,000 pages). Tests shrink them.
var dedupLimits = [dedupLevels - 1]int64{32768, 1 << 20}

// dedupChunk is how many entries one move transaction takes: a few
// milliseconds of the writer's time.
var dedupChunk = 4096

// dedupTick is how often the job looks at the levels' sizes.
var dedupTick = 250 * time.Millisecond

// dedupClaimSQL takes a slot: it adds (conv, sender, cmid_hash ?3) -> seq
// to dedup_0 unless some level holds a key from ?3 to ?4; no row affected
// means a slot is taken (a retry, or another client_msg_id with that
// hash). A probe (insertSlots) passes its slot twice; the fast path
// (claimFirst) passes the hash's slots, all of which must be free.
const dedupClaimSQL = `INSERT INTO dedup_0 (conv, sender, cmid_hash, seq)
	SELECT ?1, ?2, ?3, ?5
	WHERE NOT EXISTS (SELECT 1 FROM dedup_0 WHERE conv = ?1 AND sender = ?2 AND cmid_hash BETWEEN ?3 AND ?4)
	AND NOT EXISTS (SELECT 1 FROM dedup_1 WHERE conv = ?1 AND sender = ?2 AND cmid_hash BETWEEN ?3 AND ?4)
	AND NOT EXISTS (SELECT 1 FROM dedup_2 WHERE conv = ?1 AND sender = ?2 AND cmid_hash BETWEEN ?3 AND ?4)
	ON CONFLICT DO NOTHING`

// dedupFindSQL finds the message stored under a client_msg_id: the seqs
// of its slots in every level, confirmed by the stored text.
const dedupFindSQL = `SELECT ` + messageColumns + ` FROM messages WHERE conv = ?1 AND seq IN (
		SELECT seq FROM dedup_0 WHERE conv = ?1 AND sender = ?2 AND cmid_hash IN (?3, ?4, ?5, ?6)
		UNION ALL SELECT seq FROM dedup_1 WHERE conv = ?1 AND sender = ?2 AND cmid_hash IN (?3, ?4, ?5, ?6)
		UNION ALL SELECT seq FROM dedup_2 WHERE conv = ?1 AND sender = ?2 AND cmid_hash IN (?3, ?4, ?5, ?6))
	AND sender = ?2 AND client_msg_id = ?7`

// claimSlot takes slot h for seq; false when it is taken.
func claimSlot(t *wtx, conv, sender, h, seq int64) (bool, error) {
	return claimRange(t, conv, sender, h, h, seq)
}

// claimFirst takes the first slot of cmid's hash for seq when every slot
// of the hash is free in every level; false otherwise, and the caller
// takes the slow path (findDuplicate, then insertSlots). Only the first
// slot free is not enough: retention gives back the slot of a message it
// deletes, and a client_msg_id with the same hash stored in the next slot
// would then be stored again instead of answered (PROTOCOL guarantee 3).
func claimFirst(t *wtx, conv, sender int64, cmid string, seq int64) (h int64, ok bool, err error) {
	h = cmidHash(cmid)
	hi := h + (cmidProbes - 1)
	if hi < h {
		return h, false, nil // the slots wrap past the largest int64: the slow path
	}
	ok, err = claimRange(t, conv, sender, h, hi, seq)
	return h, ok, err
}

func claimRange(t *wtx, conv, sender, lo, hi, seq int64) (bool, error) {
	st, err := t.stmt(dedupClaimSQL)
	if err != nil {
		return false, err
	}
	res, err := st.ExecContext(t.ctx, conv, sender, lo, hi, seq)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// dedupForget removes the dedup entries of conv's messages up to seq last
// (retention), from every level: a message that is gone no longer
// answers a retry.
func dedupForget(t *wtx, conv, last int64) error {
	for k := range dedupLevels {
		q := `DELETE FROM dedup_` + strconv.Itoa(k) + ` WHERE (conv, sender, cmid_hash) IN
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
	// sizes[k] is dedup_k's size as the job last counted it; the moves
	// it makes keep it current, appends only ever add to dedup_0.
	sizes [dedupLevels - 1]atomic.Int64
	// moved counts the entries moved, for tests and benchmarks.
	moved atomic.Int64
}

func (db *DB) startCompactor() {
	c := &compactor{db: db, log: db.opts.Logger, stop: make(chan struct{}), done: make(chan struct{})}
	db.compactor = c
	go c.loop()
}

func (c *compactor) close() {
	close(c.stop)
	<-c.done
}

func (c *compactor) loop() {
	defer close(c.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-c.stop
		cancel()
	}()
	// dedup_1 is counted once; dedup_0, small, at every tick.
	counted := false
	tick := time.NewTicker(dedupTick)
	defer tick.Stop()
	for {
		if !counted {
			n, err := c.count(ctx, 1)
			if err == nil {
				c.sizes[1].Store(n)
				counted = true
			}
		}
		if counted {
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

func (c *compactor) count(ctx context.Context, k int) (int64, error) {
	var n int64
	err := c.db.readers.QueryRowContext(ctx, `SELECT COUNT(*) FROM dedup_`+strconv.Itoa(k)).Scan(&n)
	return n, err
}

// pass moves every full level into the next, smallest level first.
func (c *compactor) pass(ctx context.Context) error {
	n0, err := c.count(ctx, 0)
	if err != nil {
		return err
	}
	c.sizes[0].Store(n0)
	for k := range dedupLevels - 1 {
		if c.sizes[k].Load() < dedupLimits[k] {
			continue
		}
		if err := c.moveLevel(ctx, k); err != nil {
			return err
		}
	}
	return nil
}

// moveLevel moves dedup_k's entries into dedup_k+1, a chunk per
// transaction, in key order from the lowest; entries added behind the
// cursor meanwhile wait for the next pass.
func (c *compactor) moveLevel(ctx context.Context, k int) error {
	from, to := "dedup_"+strconv.Itoa(k), "dedup_"+strconv.Itoa(k+1)
	at := dedupBelowAll
	// Under a full load the job's transactions wait behind batches of
	// appends and the level outgrows its bound: bigger chunks then, so
	// that the job keeps up (up to 8 times the chunk).
	chunk := dedupChunk * int(min(8, max(1, c.sizes[k].Load()/dedupLimits[k])))
	for {
		var n int64
		var last bool
		err := c.db.w.exec(ctx, func(t *wtx) error {
			var err error
			n, last, at, err = moveChunk(t, from, to, at, chunk)
			return err
		})
		if err != nil {
			return err
		}
		c.moved.Add(n)
		c.sizes[k].Add(-n)
		if k+1 < len(c.sizes) {
			c.sizes[k+1].Add(n)
		}
		if last {
			if k > 0 {
				// Retention deletes from the levels too: count again.
				if m, err := c.count(ctx, k); err == nil {
					c.sizes[k].Store(m)
				}
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
	res, err := t.ExecContext(t.ctx, `INSERT INTO `+to+` (conv, sender, cmid_hash, seq)
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
