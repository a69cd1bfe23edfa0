package postgres

import (
	"context"
	"time"

	"github.com/imserver/imserver/internal/retention"
	"github.com/jackc/pgx/v5"
)

// Retention on PostgreSQL, as storage/retention.go does it on SQLite:
// messages older than Options.Retention are deleted by a background job,
// a conversation at a time, in small function jobs of the writer, so that
// sends queued meanwhile commit between two of them. Seqs, members'
// ranges and markers are not touched (PROTOCOL.md allows gaps). Each node
// runs the job; two nodes cutting the same conversation delete the same
// rows, one after the other (the write lock orders them).

const (
	defaultRetentionBatch = 500
	retentionPause        = 5 * time.Millisecond
)

func (db *DB) startRetention() {
	if db.opts.Retention > 0 {
		db.retention = retention.Start(db.opts.Retention, db.opts.RetentionEvery, db.DeleteBefore)
	}
}

// DeleteBefore deletes every message stamped before cutoff, in small
// transactions of the writer, and returns how many it deleted. Each
// conversation is cut from its oldest message up to the first one at or
// after cutoff, and never beyond (timestamps grow with seqs).
func (db *DB) DeleteBefore(ctx context.Context, cutoff time.Time) (int64, error) {
	before := cutoff.UnixMilli()
	batch := db.opts.RetentionBatch
	if batch <= 0 {
		batch = defaultRetentionBatch
	}
	rows, err := db.pool.Query(ctx, `SELECT c.id FROM conversations c
		WHERE (SELECT ts FROM messages m WHERE m.conv_id = c.id ORDER BY seq LIMIT 1) < $1`, before)
	if err != nil {
		return 0, wrap(err)
	}
	convs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, wrap(err)
	}
	var total int64
	for _, conv := range convs {
		for {
			var n int64
			more := false
			err := db.w.exec(ctx, func(t *wtx) error {
				n, more = 0, false
				rs, err := t.Query(`SELECT seq, ts FROM messages WHERE conv_id = $1 ORDER BY seq LIMIT $2`, conv, batch)
				if err != nil {
					return err
				}
				var last int64
				seen := 0
				for rs.Next() {
					var seq, ts int64
					if err := rs.Scan(&seq, &ts); err != nil {
						rs.Close()
						return err
					}
					seen++
					if ts >= before {
						break
					}
					last = seq
					n++
				}
				rs.Close()
				if err := rs.Err(); err != nil {
					return err
				}
				if n == 0 {
					return nil
				}
				more = seen == batch && int(n) == batch
				// Attachments go with their messages: the links, and the
				// bytes of files no other message holds (after the commit).
				rs, err = t.Query(`SELECT DISTINCT seq FROM message_files WHERE conv_id = $1 AND seq <= $2`, conv, last)
				if err != nil {
					return err
				}
				seqs, err := pgx.CollectRows(rs, pgx.RowTo[int64])
				if err != nil {
					return err
				}
				for _, s := range seqs {
					if err := eraseAttachments(t, conv, s); err != nil {
						return err
					}
				}
				// The search vectors go with the rows; reactions, mention
				// rows and unread exclusions are deleted with them.
				// A member's own texts past its marker leave its own_unread
				// with their rows: read recounts it from the rows, and an
				// expired seq counts like any other (uncounted).
				for _, q := range []string{
					`DELETE FROM reactions WHERE conv_id = $1 AND target <= $2`,
					`DELETE FROM uncounted WHERE conv_id = $1 AND seq <= $2`,
					`DELETE FROM mentions WHERE user_id IN (SELECT user_id FROM members WHERE conv_id = $1) AND conv_id = $1 AND seq <= $2`,
					`UPDATE members mb SET own_unread = mb.own_unread - (SELECT COUNT(*) FROM messages m
						WHERE m.conv_id = $1 AND m.seq > GREATEST(mb.read_seq, mb.min_seq - 1) AND m.seq <= LEAST($2::bigint, COALESCE(mb.max_seq, $2::bigint))
						AND m.sender_id = mb.user_id AND m.kind = 'text' AND m.deleted IS NOT TRUE)
						WHERE mb.conv_id = $1 AND mb.own_unread > 0`,
					`DELETE FROM messages WHERE conv_id = $1 AND seq <= $2`,
				} {
					if _, err := t.Exec(q, conv, last); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				return total, wrap(err)
			}
			total += n
			if !more {
				break
			}
			select {
			case <-ctx.Done():
				return total, ctx.Err()
			case <-time.After(retentionPause):
			}
		}
	}
	return total, nil
}
