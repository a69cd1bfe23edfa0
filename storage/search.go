package storage

import (
	"context"
	"database/sql"
	"errors"
	"sort"
	"strings"

	"github.com/imserver/imserver/chat"
)

// snippetRunes is the length of a search result's snippet.
const snippetRunes = 120

// searchRange is a conversation's visible range for one user.
type searchRange struct {
	conv   string
	num    int64
	lo, hi int64
}

// Search implements chat.MessageStore. Each conversation of the user is
// searched within its visible range (the index's rowids of a conversation
// are contiguous: num << 32 | seq), newest first, for at most limit+1
// hits; the hits are then ordered by time across conversations.
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
	match, err := tx.PrepareContext(ctx, `SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? AND rowid BETWEEN ? AND ? ORDER BY rowid DESC LIMIT ?`)
	if err != nil {
		return res, err
	}
	defer match.Close()
	load, err := tx.PrepareContext(ctx, `SELECT `+messageColumns+` FROM messages WHERE conv_id = ? AND seq = ?`)
	if err != nil {
		return res, err
	}
	defer load.Close()
	var hits []chat.SearchHit
	more := false
	for _, r := range ranges {
		hi := r.hi
		if q.BeforeSeq > 0 {
			hi = min(hi, q.BeforeSeq-1)
		}
		if hi < r.lo {
			continue
		}
		rows, err := match.QueryContext(ctx, q.Match, ftsRowid(r.num, r.lo), ftsRowid(r.num, hi), q.Limit+1)
		if err != nil {
			return res, searchError(err)
		}
		var seqs []int64
		for rows.Next() {
			var rowid int64
			if err := rows.Scan(&rowid); err != nil {
				rows.Close()
				return res, err
			}
			seqs = append(seqs, rowid&(1<<32-1))
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return res, searchError(err)
		}
		if len(seqs) > q.Limit {
			more, seqs = true, seqs[:q.Limit]
		}
		for _, seq := range seqs {
			m, err := scanMessage(load.QueryRowContext(ctx, r.conv, seq), r.conv)
			if errors.Is(err, sql.ErrNoRows) {
				continue
			} else if err != nil {
				return res, err
			}
			if m.Kind != chat.KindText || m.Deleted {
				continue
			}
			hits = append(hits, chat.SearchHit{Conv: r.conv, Message: m})
		}
	}
	sort.Slice(hits, func(i, j int) bool {
		a, b := &hits[i].Message, &hits[j].Message
		if a.TS != b.TS {
			return a.TS > b.TS
		}
		if a.Conv != b.Conv {
			return a.Conv > b.Conv
		}
		return a.Seq > b.Seq
	})
	if len(hits) > q.Limit {
		more, hits = true, hits[:q.Limit]
	}
	for i := range hits {
		m := &hits[i].Message
		one := []chat.Message{*m}
		if err := foldReactions(ctx, tx, m.Conv, one); err != nil {
			return res, err
		}
		*m = one[0]
		hits[i].Snippet = chat.Snippet(m.Body, q.Terms, snippetRunes)
	}
	res.Results = append(res.Results, hits...)
	res.Completed = !more
	return res, nil
}

// searchRanges lists the visible ranges of user's conversations (only conv
// when it is set), including those it left.
func searchRanges(ctx context.Context, tx *sql.Tx, user, conv string) ([]searchRange, error) {
	query := `SELECT m.conv_id, c.num, m.min_seq, COALESCE(m.max_seq, c.max_seq) FROM members m
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
	var out []searchRange
	for rows.Next() {
		var r searchRange
		if err := rows.Scan(&r.conv, &r.num, &r.lo, &r.hi); err != nil {
			return nil, err
		}
		out = append(out, r)
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
