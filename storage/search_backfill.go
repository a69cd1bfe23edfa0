package storage

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"time"

	"github.com/imserver/imserver/chat"
)

// Background indexing. Migrations 0007 and 0016 leave the search index
// empty and record in search_backfill.pending the newest message (by id,
// the index's document number) it did not index: every message at or
// below pending waits for this job, every one above it is the writer's
// (it indexes what it sends and edits, in the same transaction, as
// always). The job indexes the waiting messages newest first (the ones
// searches meet first), a small batch per writer transaction (a function
// job, which a batch of sends shares), lowering pending in the same
// transaction, so that a restart resumes where it was and no message is
// ever indexed twice or missed.
//
// The writer leaves messages at or below pending out of the index
// entirely: an edit of one changes only its body (the job indexes the
// body the message has when it gets there), a delete blanks it and
// retention removes it (the job skips a text with no body and never sees
// a removed row, so a deleted message never becomes searchable). Removing
// from a contentless index what it never held would corrupt it.

// Background indexing defaults.
const (
	// defaultBackfillBatch bounds the documents one transaction indexes:
	// a few milliseconds of the writer's time.
	defaultBackfillBatch = 500
	// backfillPause is the writer's free time between two batches.
	backfillPause = 5 * time.Millisecond
	// backfillRetry is the wait after a failed batch (a failing disk).
	backfillRetry = time.Second
)

// backfill runs the indexing job until the index is complete or stop
// closes.
type backfill struct {
	db   *DB
	stop chan struct{}
	done chan struct{}
}

// startBackfill starts the job when documents wait for it.
func (db *DB) startBackfill(ctx context.Context) error {
	var pending int64
	err := db.readers.QueryRowContext(ctx, `SELECT pending FROM search_backfill`).Scan(&pending)
	if err != nil {
		return err
	}
	if pending == 0 {
		db.w.indexed.Store(true)
		return nil
	}
	b := &backfill{db: db, stop: make(chan struct{}), done: make(chan struct{})}
	db.backfill = b
	go b.loop()
	return nil
}

func (b *backfill) close() {
	close(b.stop)
	<-b.done
}

func (b *backfill) loop() {
	defer close(b.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-b.stop
		cancel()
	}()
	batch := b.db.opts.SearchBackfillBatch
	if batch <= 0 {
		batch = defaultBackfillBatch
	}
	pause := b.db.opts.SearchBackfillPause
	if pause <= 0 {
		pause = backfillPause
	}
	start := time.Now()
	var indexed int64
	logged := false
	for {
		var pending int64
		var n int
		err := b.db.w.execKeepingMembers(ctx, func(t *wtx) error {
			var err error
			pending, n, err = t.w.backfillBatch(t, batch)
			return err
		})
		wait := pause
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			slog.Warn("search index: indexing older messages", "err", err)
			wait = backfillRetry
		case pending == 0:
			b.db.w.indexed.Store(true)
			slog.Info("search index: older messages indexed", "indexed", indexed+int64(n), "took", time.Since(start).Round(time.Millisecond))
			return
		default:
			indexed += int64(n)
			if !logged {
				slog.Info("search index: indexing older messages in the background", "pending_docs", pending)
				logged = true
			}
		}
		select {
		case <-b.stop:
			return
		case <-time.After(wait):
		}
	}
}

// backfillBatch indexes up to limit waiting documents, the newest first,
// and lowers pending past them. It returns the new pending (0: the index
// is complete) and how many documents it indexed.
func (w *writer) backfillBatch(t *wtx, limit int) (int64, int, error) {
	// The job changes pending: the transaction reads it again after it
	// (and after a rollback of it).
	defer func() { t.pendingRead = false }()
	var pending int64
	if err := t.QueryRowContext(t.ctx, `SELECT pending FROM search_backfill`).Scan(&pending); err != nil {
		return 0, 0, err
	}
	if pending == 0 {
		return 0, 0, nil
	}
	type doc struct {
		doc  int64
		body string
	}
	docs := make([]doc, 0, limit)
	rows, err := t.QueryContext(t.ctx, `SELECT id, body FROM messages
		WHERE id <= ? AND kind = 'text' ORDER BY id DESC LIMIT ?`, pending, limit)
	if err != nil {
		return 0, 0, err
	}
	scanned, lowest := 0, pending
	for rows.Next() {
		var d doc
		if err := rows.Scan(&d.doc, &d.body); err != nil {
			rows.Close()
			return 0, 0, err
		}
		scanned, lowest = scanned+1, d.doc
		if d.body != "" {
			docs = append(docs, d)
		}
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return 0, 0, err
	}
	next := int64(0)
	if scanned == limit {
		// A full batch: more may wait below its oldest doc.
		next = lowest - 1
	}
	// Ascending doc order: FTS5 appends to its pending segment while the
	// rowids grow.
	ins, err := t.stmt(`INSERT INTO messages_fts (rowid, body) VALUES (?, ?)`)
	if err != nil {
		return 0, 0, err
	}
	for i := len(docs) - 1; i >= 0; i-- {
		if _, err := ins.ExecContext(t.ctx, docs[i].doc, docs[i].body); err != nil {
			return 0, 0, err
		}
	}
	st, err := t.stmt(`UPDATE search_backfill SET pending = ?`)
	if err != nil {
		return 0, 0, err
	}
	if _, err := st.ExecContext(t.ctx, next); err != nil {
		return 0, 0, err
	}
	return next, len(docs), nil
}

// unindexed returns pending: the writer leaves docs at or below it to the
// job. Read once per transaction until the job has finished (it never
// raises pending, and once 0 it stays 0).
func (t *wtx) unindexed() (int64, error) {
	if t.w.indexed.Load() {
		return 0, nil
	}
	if !t.pendingRead {
		st, err := t.stmt(`SELECT pending FROM search_backfill`)
		if err != nil {
			return 0, err
		}
		if err := st.QueryRowContext(t.ctx).Scan(&t.pending); err != nil {
			return 0, err
		}
		t.pendingRead = true
	}
	return t.pending, nil
}

// searchIndexing says how far the job has come, nil when it is done.
func searchIndexing(ctx context.Context, tx *sql.Tx) (*chat.SearchIndexing, error) {
	var pending, total int64
	if err := tx.QueryRowContext(ctx, `SELECT pending, total FROM search_backfill`).Scan(&pending, &total); err != nil {
		return nil, err
	}
	if pending == 0 {
		return nil, nil
	}
	return &chat.SearchIndexing{Done: total - pending, Total: total}, nil
}
