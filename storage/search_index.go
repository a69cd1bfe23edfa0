package storage

import (
	"slices"
	"strings"
)

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
		old, text, pair := o.old, o.text, false
		if old != "" && text != "" {
			// An edit: only the words it takes out are removed (a secure
			// delete each, see ftsDiff) and only those it brings are added.
			if gone, added, ok := ftsDiff(old, text); ok {
				if gone == "" && added == "" {
					continue
				}
				old, text, pair = gone, added, true
			}
		}
		if old != "" || pair {
			a[0].Value, a[1].Value = doc, old
			if _, err := del.exec.ExecContext(t.ctx, a[:]); err != nil {
				return err
			}
		}
		if text != "" || pair {
			a[0].Value, a[1].Value = doc, text
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

// ftsDiff returns, for an edit of a document from old to text, the words
// of old that text lacks (gone) and those of text that old lacks (added),
// each joined by spaces, when both texts are ASCII; ok is false otherwise.
//
// The index keeps no positions and no sizes (detail=none, columnsize=0):
// what it holds of a document is the set of its words. Removing gone and
// adding added leaves the same set as removing old and adding text, while
// the secure delete (a seek in every segment for each word) is paid only
// for the words that leave, which is what erasure needs: a word of the
// old text that the new one still holds stays searchable anyway. A typo
// fixed is one word out and one in instead of every word twice. Both
// statements are still made (an empty text is allowed), so the index's
// count of documents stays what a full delete and insert leave.
//
// For ASCII the tokenizer (unicode61) is exact and simple: a word is a
// run of letters and digits, folded to lower case. Beyond ASCII its
// classes and folding are Unicode tables of SQLite's own, so the full
// texts are given to it instead.
func ftsDiff(old, text string) (gone, added string, ok bool) {
	ow, ok1 := asciiWords(old)
	nw, ok2 := asciiWords(text)
	if !ok1 || !ok2 {
		return "", "", false
	}
	return missing(ow, nw), missing(nw, ow), true
}

// missing joins the words of a that b lacks, each once.
func missing(a, b []string) string {
	in := func(w string) bool { return slices.Contains(b, w) }
	if len(b) > 32 {
		// Long texts through a set, not word by word.
		set := make(map[string]struct{}, len(b))
		for _, x := range b {
			set[x] = struct{}{}
		}
		in = func(w string) bool { _, ok := set[w]; return ok }
	}
	var out []byte
	seen := make(map[string]struct{})
	for _, w := range a {
		if _, dup := seen[w]; dup || in(w) {
			continue
		}
		seen[w] = struct{}{}
		if len(out) > 0 {
			out = append(out, ' ')
		}
		out = append(out, w...)
	}
	return string(out)
}

// asciiWords cuts s into the words unicode61 makes of it, lower-cased;
// false when s is not all ASCII.
func asciiWords(s string) ([]string, bool) {
	var words []string
	start := -1
	for i := 0; i <= len(s); i++ {
		var c byte = ' '
		if i < len(s) {
			c = s[i]
		}
		if c >= 0x80 {
			return nil, false
		}
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		switch {
		case alnum && start < 0:
			start = i
		case !alnum && start >= 0:
			words = append(words, strings.ToLower(s[start:i]))
			start = -1
		}
	}
	return words, true
}
