package storage

import "slices"

// The search index (messages_fts, migrations 0002 and 0007) holds the
// current body of every text message that has one, under a document number
// (doc) handed out in commit order: FTS5 walks a query's hits from the end cheaply, so the
// newest come first whatever their conversation. search_docs maps a doc
// back to its message and messages.doc maps the other way. The writer keeps
// them in the same transaction as the messages.

// nextDoc hands out the next document number; the first use in a
// transaction reads where the numbers stand (another process sharing the
// database may have taken some). Numbers start above every doc the
// background job had to index (search_backfill.total), so that a new
// message is the writer's to index even when the newest older ones were
// deleted.
func (t *wtx) nextDoc() (int64, error) {
	if t.doc == 0 {
		st, err := t.stmt(`SELECT MAX(COALESCE((SELECT MAX(doc) FROM search_docs), 0), (SELECT total FROM search_backfill))`)
		if err != nil {
			return 0, err
		}
		if err := st.QueryRowContext(t.ctx).Scan(&t.doc); err != nil {
			return 0, err
		}
	}
	t.doc++
	return t.doc, nil
}

// index adds body as the text of doc, the document of seq in conv.
func (w *writer) index(t *wtx, conv string, seq, doc int64, body string) error {
	st, err := t.stmt(`INSERT INTO search_docs (doc, conv_id, seq) VALUES (?, ?, ?)`)
	if err != nil {
		return err
	}
	if _, err := st.ExecContext(t.ctx, doc, conv, seq); err != nil {
		return err
	}
	return w.reindex(t, doc, body)
}

// The index's own writes wait in ftsOps until the end of the transaction
// (applyFTS, before COMMIT or a function job) and are then made in
// ascending doc order. FTS5 flushes its pending terms to a new segment
// whenever a write's rowid is not above the previous one; an edit removes
// and re-adds an old doc between new ones, so written as they come each
// edit or delete would cost two flushes, two more small segments to merge,
// and one more segment for every later secure delete and query to seek.
// Nothing in the writer's transaction reads the index, and searches read
// only committed data, so deferring within the transaction changes nothing
// anyone sees.

// ftsOp is what the transaction does to one doc of the index: remove the
// text the index held before the transaction (old, "" for none) and add
// its text at the end (text, "" for none).
type ftsOp struct {
	old, text string
}

// op returns doc's pending operation, old being its text in the index as
// it stands if doc has none yet.
func (t *wtx) op(doc int64, old string) *ftsOp {
	if t.fts == nil {
		t.fts = make(map[int64]*ftsOp)
	}
	o := t.fts[doc]
	if o == nil {
		o = &ftsOp{old: old}
		t.fts[doc] = o
	}
	return o
}

// reindex makes body doc's text (doc's old text must be out first).
func (w *writer) reindex(t *wtx, doc int64, body string) error {
	t.op(doc, "").text = body
	return nil
}

// unindex takes doc's text, body, out of the index: a contentless index
// must be told the old text to find the entries it removes. The removal
// is a secure delete (migrations 0002 and 0007): the entries leave the pages.
func (w *writer) unindex(t *wtx, doc int64, body string) error {
	if doc == 0 || body == "" {
		return nil
	}
	t.op(doc, body).text = ""
	return nil
}

// applyFTS makes the transaction's pending index writes, in doc order
// (for one doc, the removal before the addition).
func (w *writer) applyFTS(t *wtx) error {
	if len(t.fts) == 0 {
		return nil
	}
	// Docs at or below pending are not in the index yet: the background
	// job indexes them with the body they have then (search_backfill.go).
	pending, err := t.unindexed()
	if err != nil {
		return err
	}
	docs := make([]int64, 0, len(t.fts))
	for doc := range t.fts {
		if doc > pending {
			docs = append(docs, doc)
		}
	}
	slices.Sort(docs)
	if len(docs) == 0 {
		clear(t.fts)
		return nil
	}
	del, err := t.stmt(`INSERT INTO messages_fts (messages_fts, rowid, body) VALUES ('delete', ?, ?)`)
	if err != nil {
		return err
	}
	ins, err := t.stmt(`INSERT INTO messages_fts (rowid, body) VALUES (?, ?)`)
	if err != nil {
		return err
	}
	a := &w.ftsArgs
	defer func() { a[1].Value = nil }()
	for _, doc := range docs {
		o := t.fts[doc]
		if o.old != "" {
			a[0].Value, a[1].Value = doc, o.old
			if _, err := del.exec.ExecContext(t.ctx, a[:]); err != nil {
				return err
			}
		}
		if o.text != "" {
			a[0].Value, a[1].Value = doc, o.text
			if _, err := ins.exec.ExecContext(t.ctx, a[:]); err != nil {
				return err
			}
		}
	}
	clear(t.fts)
	return nil
}

// forget drops doc from the index and its map (a deleted message).
func (w *writer) forget(t *wtx, doc int64, body string) error {
	if doc == 0 {
		return nil
	}
	if err := w.unindex(t, doc, body); err != nil {
		return err
	}
	st, err := t.stmt(`DELETE FROM search_docs WHERE doc = ?`)
	if err != nil {
		return err
	}
	_, err = st.ExecContext(t.ctx, doc)
	return err
}
