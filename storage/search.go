package storage

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"

	"github.com/imserver/imserver/chat"
)

// snippetRunes is the length of a search result's snippet.
const snippetRunes = 120

// searchRange is a conversation's visible range for one user.
type searchRange struct {
	lo, hi int64
}

// Search implements chat.MessageStore. The hits of the query are walked
// from the newest (the index is keyed by the messages' ids, in commit
// order) and kept when they lie in one of the user's visible ranges, until
// the page is full. The cost is the hits newer than the last one returned,
// whoever may see them; the index answers far faster than one query per
// conversation would (each query seeks every term in every segment).
func (db *DB) Search(ctx context.Context, user string, q chat.SearchQuery) (chat.SearchResults, error) {
	res := chat.SearchResults{Results: []chat.SearchHit{}}
	tx, err := db.readers.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return res, err
	}
	defer tx.Rollback()
	ranges, err := searchRanges(ctx, tx, user, q.Conv)
	if err != nil {
		return res, err
	}
	if q.Conv != "" && len(ranges) == 0 {
		return res, db.missingMember(ctx, tx, q.Conv)
	}
	if len(ranges) == 0 {
		res.Completed = true
		return res, nil
	}
	if res.Indexing, err = searchIndexing(ctx, tx); err != nil {
		return res, err
	}
	terms := searchTerms(q.Parts)
	match, phrases := ftsMatch(terms)
	if match == "" {
		match = q.Match // a query not made by chat.ParseSearch
	}
	// A hit's document number is its message's id (migration 0016).
	query := `SELECT m.id, m.conv, m.seq FROM messages_fts f JOIN messages m ON m.id = f.rowid WHERE messages_fts MATCH ?`
	args := []any{match}
	if q.Cursor != "" {
		// Hits are walked by document number, newest first: the next
		// page starts below the last one returned.
		doc, err := parseCursor(q.Cursor)
		if err != nil {
			return res, err
		}
		query += ` AND f.rowid < ?`
		args = append(args, doc)
	}
	if q.Conv != "" {
		key, err := db.lookupKey(ctx, tx, q.Conv)
		if err != nil {
			return res, err
		}
		query += ` AND m.conv = ?`
		args = append(args, key)
	}
	rows, err := tx.QueryContext(ctx, query+` ORDER BY f.rowid DESC`, args...)
	if err != nil {
		return res, searchError(err)
	}
	defer rows.Close()
	load, err := tx.PrepareContext(ctx, `SELECT `+messageColumns+` FROM messages WHERE id = ?`)
	if err != nil {
		return res, err
	}
	defer load.Close()
	// A hit is loaded once it lies in the user's ranges: its phrases are
	// checked against the body (the index matched their words only), and
	// so is every term of an edited one.
	senderOf := db.senderOf(ctx, tx)
	var hits []chat.Message
	var docs []int64
	for len(hits) <= q.Limit && rows.Next() {
		var doc, key, seq int64
		if err := rows.Scan(&doc, &key, &seq); err != nil {
			return res, err
		}
		conv, err := db.idOf(ctx, tx, key)
		if err != nil {
			return res, err
		}
		r, ok := ranges[conv]
		if !ok || seq < r.lo || seq > r.hi || (q.BeforeSeq > 0 && seq >= q.BeforeSeq) {
			continue
		}
		m, err := scanMessage(load.QueryRowContext(ctx, doc), conv, senderOf)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		} else if err != nil {
			return res, err
		}
		// An edited message may be in the index under words its edits
		// took out (stale, migration 0008; only ever beside an ASCII
		// body, whose words are cut exactly as the index cuts them): its
		// body decides.
		stale := m.EditedAt != 0 && isASCII(m.Body)
		if m.Kind != chat.KindText || m.Deleted || (stale && !termsMatch(m.Body, terms)) || (phrases && !phraseMatch(m.Body, terms)) {
			continue
		}
		hits = append(hits, m)
		docs = append(docs, doc)
	}
	if err := rows.Err(); err != nil {
		return res, searchError(err)
	}
	rows.Close()
	res.Completed = len(hits) <= q.Limit
	if !res.Completed {
		hits = hits[:q.Limit]
		res.Next = cursorPrefix + strconv.FormatInt(docs[q.Limit-1], 10)
	}
	for _, m := range hits {
		one := []chat.Message{m}
		if err := foldReactions(ctx, tx, m.Conv, one); err != nil {
			return res, err
		}
		if err := db.pageFiles(ctx, tx, m.Conv, one); err != nil {
			return res, err
		}
		res.Results = append(res.Results, chat.SearchHit{Conv: m.Conv, Message: one[0], Snippet: chat.Snippet(m.Body, q.Terms, snippetRunes)})
	}
	return res, nil
}

// searchRanges returns the visible ranges of user's conversations (only
// conv when it is set), including those it left.
func searchRanges(ctx context.Context, tx *sql.Tx, user, conv string) (map[string]searchRange, error) {
	query := `SELECT m.conv_id, m.min_seq, COALESCE(m.max_seq, c.max_seq) FROM members m
		JOIN conversations c ON c.id = m.conv_id WHERE m.user_id = ?`
	args := []any{user}
	if conv != "" {
		query += ` AND m.conv_id = ?`
		args = append(args, conv)
	}
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[string]searchRange)
	for rows.Next() {
		var id string
		var r searchRange
		if err := rows.Scan(&id, &r.lo, &r.hi); err != nil {
			return nil, err
		}
		out[id] = r
	}
	return out, rows.Err()
}

// searchError turns what the index says of a query it cannot run into
// bad_request: the parser quotes every term, so this is a safety net.
func searchError(err error) error {
	if strings.Contains(err.Error(), "fts5") {
		return chat.Errorf(chat.EBadRequest, "the search query cannot be run")
	}
	return err
}

// cursorPrefix marks a cursor as this store's: a search's Next is the
// document number of the last hit it returned.
const cursorPrefix = "d"

func parseCursor(c string) (int64, error) {
	doc, err := strconv.ParseInt(strings.TrimPrefix(c, cursorPrefix), 10, 64)
	if !strings.HasPrefix(c, cursorPrefix) || err != nil || doc < 1 {
		return 0, chat.ErrBadCursor
	}
	return doc, nil
}
