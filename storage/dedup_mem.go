package storage

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
)

// The newest dedup level is in memory (migration 0011): the keys of the
// messages whose id is above counters.dedup_mark. The messages table is
// its log: every row carries its key (conv, sender, cmid_hash) and seq,
// so a start reads the level back from the rows above the mark, and a
// crash loses nothing. The compactor moves the level into dedup_1, oldest
// first, raising the mark as it goes (compactor.moveMem).
//
// Why: in dedup_0, a table, each append wrote its key to a random leaf
// (the hash is random within a sender's range), a page of the WAL per
// message in a batch of messages from many senders, and its INSERT …
// SELECT kept a statement journal: together the costliest statement of
// an append. A map decides the newest level now, and only the two bigger
// levels are read from the file.
//
// Several processes may share the database file. Each keeps its own
// level and, in every transaction that uses it (under SQLite's write
// lock), first reads the rows other processes appended since it last
// looked and the mark their compactors may have raised (wtx.mem).
// Message ids come from counters.messages_hi, in commit order, never
// reused (retention may delete the newest rows), so "the rows above the
// last id seen" is exact.

// memEntry is a key's value in the level: its message's seq and id (the
// level drops the entries at or below the mark).
type memEntry struct{ seq, id int64 }

// memLevel is the level as committed. Only the writer's goroutine uses it
// (loadMemLevel runs before the writer starts); size is read by the
// compactor.
type memLevel struct {
	keys map[dedupKey]memEntry
	mark int64 // counters.dedup_mark as last read or raised
	seen int64 // the largest message id the level has taken in
	peak int   // the most keys keys has held since it was made
	// order lists the entries as they were taken in, by id, from head
	// on: raise drops from the front what the mark passed (an item whose
	// key was since forgotten or taken again is skipped).
	order []memKeyed
	head  int
	size  atomic.Int64
	// filters learn the keys that leave the level for the files.
	filters *filters
	// displaced is set once the level has taken in a key in a slot other
	// than the first of its client_msg_id's hash (a hash shared with
	// another client_msg_id of the sender, about never); until then a
	// claim looks up only the first slot in memory (claimRange). It stays
	// set for the process's life: being set only costs the look-ups.
	displaced bool
}

const (
	memCountersSQL = `SELECT (SELECT value FROM counters WHERE name = 'dedup_mark'), (SELECT value FROM counters WHERE name = 'messages_hi')`
	memRowsSQL     = `SELECT id, conv, sender, cmid_hash, seq, client_msg_id FROM messages WHERE id > ? ORDER BY id`
)

// loadMemLevel reads the level back from the messages above the mark.
func loadMemLevel(ctx context.Context, db *sql.DB) (*memLevel, error) {
	l := &memLevel{keys: make(map[dedupKey]memEntry)}
	var hi int64
	if err := db.QueryRowContext(ctx, memCountersSQL).Scan(&l.mark, &hi); err != nil {
		return nil, err
	}
	if err := moveBacklog(ctx, db, &l.mark, hi); err != nil {
		return nil, err
	}
	l.seen = l.mark
	rows, err := db.QueryContext(ctx, memRowsSQL, l.seen)
	if err != nil {
		return nil, err
	}
	if err := l.take(rows, hi); err != nil {
		return nil, err
	}
	return l, nil
}

// memReadBack is the most message ids a start reads back into memory; a
// longer backlog is moved to dedup_1 first, in SQL. A running store keeps
// its level far below (the job moves it from dedup_1's limit on, a stop
// moves all of it), so only a kill under a burst the job had not caught
// up with leaves more; reading millions of rows into the map took GBs.
var memReadBack int64 = 1 << 17

// moveBacklog moves the keys of the messages above *mark into dedup_1
// until at most memReadBack ids are left above it, in transactions of
// memReadBack ids each (by id range, before the writer starts).
func moveBacklog(ctx context.Context, db *sql.DB, mark *int64, hi int64) error {
	for hi-*mark > memReadBack {
		upto := *mark + memReadBack
		err := inTx(ctx, db, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO dedup_1 (conv, sender, cmid_hash, seq)
				SELECT conv, sender, cmid_hash, seq FROM messages WHERE id > ? AND id <= ?
				ORDER BY conv, sender, cmid_hash`, *mark, upto); err != nil {
				return err
			}
			// MAX: another process sharing the file may have raised it.
			_, err := tx.ExecContext(ctx, `UPDATE counters SET value = MAX(value, ?) WHERE name = 'dedup_mark'`, upto)
			return err
		})
		if err != nil {
			return fmt.Errorf("moving the dedup keys of messages %d to %d to the file: %w", *mark+1, upto, err)
		}
		*mark = upto
	}
	return nil
}

// rowScanner is *sql.Rows or the writer's *wrows.
type rowScanner interface {
	Next() bool
	Scan(...any) error
	Err() error
	Close() error
}

// take adds the keys of rows (memRowsSQL); every id up to hi is then
// seen.
func (l *memLevel) take(rows rowScanner, hi int64) error {
	defer rows.Close()
	for rows.Next() {
		var k dedupKey
		var e memEntry
		var cmid string
		if err := rows.Scan(&e.id, &k.conv, &k.sender, &k.hash, &e.seq, &cmid); err != nil {
			return err
		}
		if k.hash != cmidHash(cmid) {
			l.displaced = true
		}
		l.keys[k] = e
		l.order = append(l.order, memKeyed{k, e})
	}
	if err := rows.Err(); err != nil {
		return err
	}
	l.seen = max(l.seen, hi)
	l.grew()
	return nil
}

// raise sets the mark to mark, when higher, and drops the entries at or
// below it (their keys are in dedup_1 or dedup_2 now); then it gives back
// the memory of what left the level.
func (l *memLevel) raise(mark int64) {
	if mark > l.mark {
		l.mark = mark
		for ; l.head < len(l.order) && l.order[l.head].e.id <= mark; l.head++ {
			l.drop(l.order[l.head])
		}
	}
	if l.head > len(l.order)/2 {
		// In place: a copy sized to what is left was outgrown by the
		// next commits at once, and growing it back cost more than the
		// map's inserts (BENCHMARKS.md, "Session 15").
		n := copy(l.order, l.order[l.head:])
		l.order, l.head = l.order[:n], 0
		if cap(l.order) > 4*n && cap(l.order) > 1<<16 {
			l.order = append([]memKeyed(nil), l.order...)
		}
	}
	// A Go map keeps its buckets when entries are deleted: after a
	// level that outgrew its bound (a start that read back a long
	// backlog, a burst the job fell behind) is moved, its memory would
	// stay taken. A smaller map for what is left gives it back.
	if n := len(l.keys); l.peak > 4*n && l.peak > 1<<16 {
		keys := make(map[dedupKey]memEntry, n)
		maps.Copy(keys, l.keys)
		l.keys, l.peak = keys, n
	}
	l.size.Store(int64(len(l.keys)))
}

// drop takes out an entry that is on file now, unless its key was since
// forgotten or taken again; the filters learn the key.
func (l *memLevel) drop(it memKeyed) {
	if e, ok := l.keys[it.k]; ok && e.id == it.e.id {
		if l.filters != nil {
			l.filters.added(it.k)
		}
		delete(l.keys, it.k)
	}
}

// snapshot returns the level's entries at or below id upto, as committed.
func (l *memLevel) snapshot(upto int64) []memKeyed {
	out := make([]memKeyed, 0, len(l.keys))
	for k, e := range l.keys {
		if e.id <= upto {
			out = append(out, memKeyed{k, e})
		}
	}
	return out
}

// grew records the level's size after it took in keys.
func (l *memLevel) grew() {
	l.peak = max(l.peak, len(l.keys))
	l.size.Store(int64(len(l.keys)))
}

// memTx is what one writer transaction does to the level: the keys it
// claims and forgets, seen by itself alone until it commits
// (memLevel.commit).
type memTx struct {
	synced bool
	// displaced is memLevel.displaced for the keys this transaction
	// claimed.
	displaced bool
	hi        int64 // counters.messages_hi at the start
	last      int64 // the last message id handed out
	ops       map[dedupKey]memOp
	undo      []memUndo
	mark      int64 // the mark this transaction raises, 0 for none
	// moved are entries this transaction put on file (compactor.moveMem):
	// they leave the level when it commits.
	moved []memKeyed
}

// memOp is a key's state in a transaction: its entry, or gone.
type memOp struct {
	e    memEntry
	gone bool
}

// memUndo is a change a function job's savepoint rollback takes back:
// the key's state before it (had false: none), the mark before it, or
// the length of moved before it.
type memUndo struct {
	k       dedupKey
	prev    memOp
	had     bool
	isMark  bool
	mark    int64
	isMoved bool
	moved   int
}

// mem returns the transaction's view of the level, synced on first use
// with what other processes committed.
func (t *wtx) mem() (*memTx, error) {
	m := &t.memTx
	if m.synced {
		return m, nil
	}
	l := t.w.mem
	st, err := t.stmt(memCountersSQL)
	if err != nil {
		return nil, err
	}
	var mark, hi int64
	if err := st.QueryRowContext(t.ctx).Scan(&mark, &hi); err != nil {
		return nil, err
	}
	// What other processes committed goes into the level at once,
	// whatever becomes of this transaction: their rows first, then the
	// mark, so that a key another process moved to the files passes
	// through the level and raise hands it to the filters.
	if hi > l.seen {
		st, err := t.stmt(memRowsSQL)
		if err != nil {
			return nil, err
		}
		rows, err := st.QueryContext(t.ctx, l.seen)
		if err != nil {
			return nil, err
		}
		if err := l.take(rows, hi); err != nil {
			return nil, err
		}
	}
	l.raise(mark)
	m.synced, m.hi, m.last = true, hi, hi
	m.ops = make(map[dedupKey]memOp)
	return m, nil
}

// nextID hands out the id of the message row the transaction inserts
// next (messages.id): above every id ever handed out.
func (m *memTx) nextID() int64 {
	m.last++
	return m.last
}

// get returns k's seq in the level as this transaction sees it.
func (m *memTx) get(l *memLevel, k dedupKey) (int64, bool) {
	if op, ok := m.ops[k]; ok {
		return op.e.seq, !op.gone
	}
	e, ok := l.keys[k]
	return e.seq, ok
}

// set records k's new state, and how to take it back.
func (m *memTx) set(k dedupKey, op memOp) {
	prev, had := m.ops[k]
	m.undo = append(m.undo, memUndo{k: k, prev: prev, had: had})
	m.ops[k] = op
}

// put claims k for the message of seq and id.
func (m *memTx) put(k dedupKey, seq, id int64) { m.set(k, memOp{e: memEntry{seq: seq, id: id}}) }

// drop forgets k.
func (m *memTx) drop(k dedupKey) { m.set(k, memOp{gone: true}) }

// raiseTo raises the mark when the transaction commits.
func (m *memTx) raiseTo(mark int64) {
	m.undo = append(m.undo, memUndo{isMark: true, mark: m.mark})
	m.mark = max(m.mark, mark)
}

// moveOut records entries the transaction put in dedup_1.
func (m *memTx) moveOut(es []memKeyed) {
	m.undo = append(m.undo, memUndo{isMoved: true, moved: len(m.moved)})
	m.moved = append(m.moved, es...)
}

// rollbackTo takes back the changes made after the undo log had n
// entries (a function job's savepoint).
func (m *memTx) rollbackTo(n int) {
	for i := len(m.undo) - 1; i >= n; i-- {
		u := m.undo[i]
		switch {
		case u.isMark:
			m.mark = u.mark
		case u.isMoved:
			m.moved = m.moved[:u.moved]
		case u.had:
			m.ops[u.k] = u.prev
		default:
			delete(m.ops, u.k)
		}
	}
	m.undo = m.undo[:n]
}

// commit applies a committed transaction's changes to the level.
func (l *memLevel) commit(m *memTx) {
	if !m.synced {
		return
	}
	n := len(l.order)
	for k, op := range m.ops {
		if op.gone {
			delete(l.keys, k)
		} else {
			l.keys[k] = op.e
			l.order = append(l.order, memKeyed{k, op.e})
		}
	}
	slices.SortFunc(l.order[n:], func(a, b memKeyed) int { return cmp.Compare(a.e.id, b.e.id) })
	for _, it := range m.moved {
		l.drop(it)
	}
	l.seen = max(l.seen, m.last)
	l.displaced = l.displaced || m.displaced
	l.grew()
	l.raise(m.mark)
}

// memKeyed is an entry with its key.
type memKeyed struct {
	k dedupKey
	e memEntry
}
