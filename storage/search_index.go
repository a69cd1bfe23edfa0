package storage

import (
	"slices"
	"strings"
)

// The search index (messages_fts, migrations 0002, 0007 and 0016) holds
// the current body of every text message that has one, under the
// message's id (migration 0016): ids are handed out in commit order and
// never reused, and FTS5 walks a query's hits from the end cheaply, so the
// newest come first whatever their conversation, and a hit is its row.
// The writer keeps the index in the same transaction as the messages. An
// edited message's entry may also hold words its edits took out
// (messages.stale, migration 0008): search checks its body.

// index adds body as the text of the message whose id is doc.
func (w *writer) index(t *wtx, doc int64, body string) {
	o := t.op(doc, "")
	o.want = append(o.want, body)
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

// ftsOp is what the transaction does to one doc of the index.
type ftsOp struct {
	// held is the text whose words the committed index holds for the doc
	// ("" for none): a contentless index must be told the words it
	// removes.
	held string
	// erase: held's words leave the index (a secure delete, migrations
	// 0002 and 0007: the entries leave the pages) before want's go in.
	// Otherwise held's words stay and only want's words it lacks are
	// added (extend).
	erase bool
	want  []string // texts whose words the index must hold at the end
}

// op returns doc's pending operation, held being the text of its words in
// the index as it stands if doc has none yet.
func (t *wtx) op(doc int64, held string) *ftsOp {
	if t.fts == nil {
		t.fts = make(map[int64]*ftsOp)
	}
	o := t.fts[doc]
	if o == nil {
		o = &ftsOp{held: held}
		t.fts[doc] = o
	}
	return o
}

// replace makes body doc's only text: every word the index held for doc
// (held) is erased first.
func (w *writer) replace(t *wtx, doc int64, held, body string) {
	o := t.op(doc, held)
	o.erase = true
	o.want = o.want[:0]
	if body != "" {
		o.want = append(o.want, body)
	}
}

// extend adds body's words to doc's and keeps those it held (held and
// body both ASCII: see asciiWords). The caller records the words body
// lacks in messages.stale.
func (w *writer) extend(t *wtx, doc int64, held, body string) {
	o := t.op(doc, held)
	o.want = append(o.want, body)
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
		remove, add := "", strings.Join(o.want, " ")
		switch {
		case o.erase:
			remove = o.held
		case o.held != "" && add != "":
			// Extended: only the words the index lacks for doc go in.
			hw, ok1 := asciiWords(o.held)
			aw, ok2 := asciiWords(add)
			if ok1 && ok2 {
				add = missing(aw, hw)
			} else {
				// Not what extend is called for; still keep every word.
				remove, add = o.held, o.held+" "+add
			}
		}
		if remove != "" {
			a[0].Value, a[1].Value = doc, remove
			if _, err := del.exec.ExecContext(t.ctx, a[:]); err != nil {
				return err
			}
		}
		if add != "" {
			a[0].Value, a[1].Value = doc, add
			if _, err := ins.exec.ExecContext(t.ctx, a[:]); err != nil {
				return err
			}
		}
	}
	clear(t.fts)
	return nil
}

// forget drops doc from the index (a deleted message); held is the text
// of the words the index holds for it, "" for none.
func (w *writer) forget(t *wtx, doc int64, held string) {
	if held != "" {
		w.replace(t, doc, held, "")
	}
}

// asciiWords and missing work out an extended doc's words. For ASCII the
// index's tokenizer (unicode61) is exact and simple: a word is a run of
// letters and digits, folded to lower case. Beyond ASCII its classes and
// folding are Unicode tables of SQLite's own, so such texts are replaced
// whole instead (a secure delete of every old word).

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
