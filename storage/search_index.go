package storage

// The search index (messages_fts, migration 0002) holds the current body of
// every text message that has one, under a document number (doc) handed out
// in commit order: FTS5 walks a query's hits from the end cheaply, so the
// newest come first whatever their conversation. search_docs maps a doc
// back to its message and messages.doc maps the other way. The writer keeps
// them in the same transaction as the messages.

// nextDoc hands out the next document number; the first use in a
// transaction reads where the numbers stand (another process sharing the
// database may have taken some).
func (t *wtx) nextDoc() (int64, error) {
	if t.doc == 0 {
		st, err := t.stmt(`SELECT COALESCE(MAX(doc), 0) FROM search_docs`)
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

// reindex adds body as doc's text (doc's old text must be out first).
func (w *writer) reindex(t *wtx, doc int64, body string) error {
	st, err := t.stmt(`INSERT INTO messages_fts (rowid, body) VALUES (?, ?)`)
	if err != nil {
		return err
	}
	a := &w.ftsArgs
	a[0].Value, a[1].Value = doc, body
	_, err = st.exec.ExecContext(t.ctx, a[:])
	a[1].Value = nil
	return err
}

// unindex takes doc's text, body, out of the index: a contentless index
// must be told the old text to find the entries it removes.
func (w *writer) unindex(t *wtx, doc int64, body string) error {
	if doc == 0 || body == "" {
		return nil
	}
	st, err := t.stmt(`INSERT INTO messages_fts (messages_fts, rowid, body) VALUES ('delete', ?, ?)`)
	if err != nil {
		return err
	}
	_, err = st.ExecContext(t.ctx, doc, body)
	return err
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
