package storage

// The search index (messages_fts, migration 0002) holds the current body of
// every text message that has one, under rowid num << 32 | seq, num being
// the conversation's stable number. The writer keeps it in the same
// transaction as the messages.

// ftsRowid is the index's rowid of seq in the conversation numbered num.
func ftsRowid(num, seq int64) int64 { return num<<32 | seq }

// convNum returns c's number, cached by the writer (it never changes).
func (w *writer) convNum(t *wtx, c *convTx) (int64, error) {
	if c.num != 0 {
		return c.num, nil
	}
	if n, ok := w.nums[c.id]; ok {
		c.num = n
		return n, nil
	}
	st, err := t.stmt(`SELECT num FROM conversations WHERE id = ?`)
	if err != nil {
		return 0, err
	}
	if err := st.QueryRowContext(t.ctx, c.id).Scan(&c.num); err != nil {
		return 0, err
	}
	if len(w.nums) >= 100_000 {
		clear(w.nums) // bounded; the numbers are read again as needed
	}
	w.nums[c.id] = c.num
	return c.num, nil
}

// index adds body as seq's text.
func (w *writer) index(t *wtx, c *convTx, seq int64, body string) error {
	if body == "" {
		return nil
	}
	num, err := w.convNum(t, c)
	if err != nil {
		return err
	}
	st, err := t.stmt(`INSERT INTO messages_fts (rowid, body) VALUES (?, ?)`)
	if err != nil {
		return err
	}
	a := &w.ftsArgs
	a[0].Value, a[1].Value = ftsRowid(num, seq), body
	_, err = st.exec.ExecContext(t.ctx, a[:])
	a[1].Value = nil
	return err
}

// unindex removes seq's entry, whose text was body: a contentless index
// must be told the old text to find the entries it removes.
func (w *writer) unindex(t *wtx, c *convTx, seq int64, body string) error {
	if body == "" {
		return nil
	}
	num, err := w.convNum(t, c)
	if err != nil {
		return err
	}
	st, err := t.stmt(`INSERT INTO messages_fts (messages_fts, rowid, body) VALUES ('delete', ?, ?)`)
	if err != nil {
		return err
	}
	_, err = st.ExecContext(t.ctx, ftsRowid(num, seq), body)
	return err
}
