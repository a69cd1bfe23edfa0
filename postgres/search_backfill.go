package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// backfillBatch is how many messages one step of the backfill reads.
const backfillBatch = 5000

// backfillSearch writes the search vectors of the text messages stored
// before migration 0004, when its settings row says that is pending. It
// walks the messages once in primary key order, one batch per
// transaction, so a start killed in the middle redoes only what is left
// (the vectors are written where still NULL) and the next start ends it.
// A row whose body changed since it was read (an edit or a delete by a
// node already running) is left alone: the writer wrote its vector.
func backfillSearch(ctx context.Context, pool *pgxpool.Pool) error {
	var n int
	if err := pool.QueryRow(ctx, `SELECT COUNT(*) FROM settings WHERE name = 'search_backfill'`).Scan(&n); err != nil || n == 0 {
		return err
	}
	conv, seq := "", int64(0)
	for {
		rows, err := pool.Query(ctx, `SELECT conv_id, seq, kind, body, search IS NULL AND deleted IS NULL FROM messages
			WHERE (conv_id, seq) > ($1, $2) ORDER BY conv_id, seq LIMIT $3`, conv, seq, backfillBatch)
		if err != nil {
			return fmt.Errorf("search backfill: %w", err)
		}
		var convs, bodies, docs []string
		var seqs []int64
		read := 0
		for rows.Next() {
			var kind, body string
			var missing bool
			if err := rows.Scan(&conv, &seq, &kind, &body, &missing); err != nil {
				rows.Close()
				return fmt.Errorf("search backfill: %w", err)
			}
			read++
			if d := searchDoc(kind, body); missing && d != "" {
				convs, seqs, bodies, docs = append(convs, conv), append(seqs, seq), append(bodies, body), append(docs, d)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("search backfill: %w", err)
		}
		if len(convs) > 0 {
			if _, err := pool.Exec(ctx, `UPDATE messages m SET search = u.d::tsvector
				FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[]) AS u(c, s, b, d)
				WHERE m.conv_id = u.c AND m.seq = u.s AND m.body = u.b AND m.search IS NULL AND m.deleted IS NULL`,
				convs, seqs, bodies, docs); err != nil {
				return fmt.Errorf("search backfill: %w", err)
			}
		}
		if read < backfillBatch {
			break
		}
	}
	_, err := pool.Exec(ctx, `DELETE FROM settings WHERE name = 'search_backfill'`)
	return err
}
