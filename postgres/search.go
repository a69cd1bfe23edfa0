package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/imserver/imserver/chat"
	"github.com/jackc/pgx/v5"
)

// Search on PostgreSQL: messages.search holds the words of a current text
// body as a tsvector (GIN index, migration 0004). The words are cut here,
// not by PostgreSQL's parser, the way SQLite's unicode61 tokenizer with
// remove_diacritics cuts them (chat.EachSearchWord). Both stores thus find the same
// messages for the same query, and nothing depends on the unaccent
// extension, which a managed PostgreSQL may not let us create. The vector
// and the query are written as literals (word:position), never parsed as
// prose by PostgreSQL.

// snippetRunes is the length of a search result's snippet (as SQLite's).
const snippetRunes = 120

// maxLexemeBytes keeps a word within what a tsvector takes (2 KiB); longer
// runs are cut (lexeme).
const maxLexemeBytes = 2000

// lexeme is w cut to maxLexemeBytes, at a rune's start.
func lexeme(w []byte) []byte {
	if len(w) <= maxLexemeBytes {
		return w
	}
	n := maxLexemeBytes
	for n > 0 && !utf8.RuneStart(w[n]) {
		n--
	}
	return w[:n]
}

// maxPosition is the largest position a tsvector records.
const maxPosition = 16383

// quoteLexeme quotes w for a tsvector or tsquery literal.
func quoteLexeme(w string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(w, `\`, `\\`), "'", "''") + "'"
}

// searchDoc returns the tsvector literal of a message of kind with body,
// "" when it is not searchable (only text with words is). Words hold no
// quote or backslash, so they are written as they are.
func searchDoc(kind, body string) string {
	if kind != chat.KindText || body == "" {
		return ""
	}
	b := make([]byte, 0, len(body)+len(body)/2+8)
	pos := 0
	chat.EachSearchWord(body, func(w []byte) {
		if pos > 0 {
			b = append(b, ' ')
		}
		pos++
		b = append(b, '\'')
		b = append(b, lexeme(w)...)
		b = append(b, '\'', ':')
		b = strconv.AppendInt(b, int64(min(pos, maxPosition)), 10)
	})
	return string(b)
}

// searchQuery turns the parsed terms of a query into a tsquery literal: a
// phrase's words follow each other (<->), a prefix applies to the last
// word (:*), and every term must match (&).
func searchQuery(parts []chat.SearchPart) (string, error) {
	var terms []string
	for _, p := range parts {
		var ws []string
		chat.EachSearchWord(p.Text, func(w []byte) { ws = append(ws, quoteLexeme(string(lexeme(w)))) })
		if len(ws) == 0 {
			continue // no word: matches anything, as FTS5's empty phrase
		}
		if p.Prefix {
			ws[len(ws)-1] += ":*"
		}
		terms = append(terms, "("+strings.Join(ws, " <-> ")+")")
	}
	if len(terms) == 0 {
		return "", chat.Errorf(chat.EBadRequest, "q holds no word to search for")
	}
	return strings.Join(terms, " & "), nil
}

// Search implements chat.MessageStore. The GIN index finds the messages
// whose vector matches; those in the user's visible ranges (from min_seq
// to max_seq, or the conversation's end while a member) are kept, newest
// first (by commit time, then seq), in one query.
func (db *DB) Search(ctx context.Context, user string, q chat.SearchQuery) (chat.SearchResults, error) {
	res := chat.SearchResults{Results: []chat.SearchHit{}}
	if !storable(q.Conv) {
		// No conversation has such an id (the SQLite store's answer).
		return res, chat.Errorf(chat.ENotFound, "conversation not found")
	}
	if !utf8.ValidString(q.Match) || !storable(user) {
		return res, chat.Errorf(chat.EBadRequest, "the search query cannot be run")
	}
	tsq, err := searchQuery(q.Parts)
	if err != nil {
		return res, err
	}
	limit := q.Limit
	if limit <= 0 {
		limit = chat.DefaultSearchLimit
	}
	tx, err := db.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return res, wrap(err)
	}
	defer tx.Rollback(context.Background())
	if q.Conv != "" {
		var n int
		if err := tx.QueryRow(ctx, `SELECT COUNT(*) FROM members WHERE conv_id = $1 AND user_id = $2`, q.Conv, user).Scan(&n); err != nil {
			return res, wrap(err)
		}
		if n == 0 {
			return res, db.missingMember(ctx, q.Conv)
		}
	}
	query := `SELECT m.conv_id, ` + messageColumns + ` FROM messages m
		JOIN members mb ON mb.conv_id = m.conv_id AND mb.user_id = $2
		JOIN conversations c ON c.id = m.conv_id
		WHERE m.search @@ $1::tsquery AND m.seq >= mb.min_seq AND m.seq <= COALESCE(mb.max_seq, c.max_seq)`
	args := []any{tsq, user, limit + 1}
	if q.Conv != "" {
		args = append(args, q.Conv)
		query += ` AND m.conv_id = $` + strconv.Itoa(len(args))
	}
	if q.BeforeSeq > 0 {
		// Paging within conv; without it, below that seq in every
		// conversation (the contract allows it).
		args = append(args, q.BeforeSeq)
		query += ` AND m.seq < $` + strconv.Itoa(len(args))
	}
	if q.Cursor != "" {
		// Below the last hit returned, in the order below.
		c, err := parseCursor(q.Cursor)
		if err != nil {
			return res, err
		}
		args = append(args, c.ts, c.conv, c.seq)
		n := len(args)
		query += fmt.Sprintf(` AND (m.ts, m.conv_id, m.seq) < ($%d, $%d, $%d)`, n-2, n-1, n)
	}
	rows, err := tx.Query(ctx, query+` ORDER BY m.ts DESC, m.conv_id DESC, m.seq DESC LIMIT $3`, args...)
	if err != nil {
		return res, wrap(err)
	}
	var hits []chat.Message
	for rows.Next() {
		m, err := scanMessageConv(rows)
		if err != nil {
			rows.Close()
			return res, wrap(err)
		}
		hits = append(hits, m)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return res, searchError(err)
	}
	res.Completed = len(hits) <= limit
	if !res.Completed {
		hits = hits[:limit]
		last := hits[limit-1]
		res.Next = formatCursor(searchCursor{ts: last.TS, conv: last.Conv, seq: last.Seq})
	}
	for i := range hits {
		one := hits[i : i+1]
		if err := db.fold(ctx, tx, one[0].Conv, one); err != nil {
			return res, wrap(err)
		}
		res.Results = append(res.Results, chat.SearchHit{Conv: one[0].Conv, Message: one[0], Snippet: chat.Snippet(one[0].Body, q.Terms, snippetRunes)})
	}
	return res, nil
}

// searchError turns what PostgreSQL says of a tsquery it cannot run into
// bad_request: the literal is built from words, so this is a safety net.
func searchError(err error) error {
	var ce *chat.Error
	if errors.As(err, &ce) {
		return err
	}
	if strings.Contains(err.Error(), "tsquery") {
		return chat.Errorf(chat.EBadRequest, "the search query cannot be run")
	}
	return wrap(err)
}

// searchCursor is where a page of results ended: results are ordered by
// (ts, conv_id, seq), newest first. As a string, "t" and the three
// separated by dots, the conversation id last (ids are opaque).
type searchCursor struct {
	ts   int64
	conv string
	seq  int64
}

func formatCursor(c searchCursor) string {
	return "t" + strconv.FormatInt(c.ts, 10) + "." + strconv.FormatInt(c.seq, 10) + "." + c.conv
}

func parseCursor(s string) (searchCursor, error) {
	parts := strings.SplitN(strings.TrimPrefix(s, "t"), ".", 3)
	if !strings.HasPrefix(s, "t") || len(parts) != 3 || !storable(parts[2]) {
		return searchCursor{}, chat.ErrBadCursor
	}
	ts, err1 := strconv.ParseInt(parts[0], 10, 64)
	seq, err2 := strconv.ParseInt(parts[1], 10, 64)
	if err1 != nil || err2 != nil {
		return searchCursor{}, chat.ErrBadCursor
	}
	return searchCursor{ts: ts, conv: parts[2], seq: seq}, nil
}
