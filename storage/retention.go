package storage

import (
	"context"
	"time"

	"github.com/imserver/imserver/chat"
	"github.com/imserver/imserver/internal/retention"
)

// Retention: messages older than Options.Retention are deleted by a
// background job, a conversation at a time, in small transactions of the
// writer (function jobs, like a join or a read marker), so that sends
// queued meanwhile commit between two of them instead of waiting for the
// whole pass.
//
// What stays consistent: a conversation's max_seq and seq_bound are not
// touched, so seqs keep growing from where they were and are never reused;
// members' ranges, read and ack markers are not touched either. A pull
// over the deleted part simply finds no rows there: it returns the
// messages above the gap, and completed is decided by the rows it found
// (the page's LIMIT+1 rule), so it stays right. A client holding seq N that
// pulls after_seq=N gets the first retained message with a seq above N;
// the seqs in between are gone for good (PROTOCOL.md allows gaps).

// Retention defaults.
const (
	// defaultRetentionBatch bounds the messages one transaction deletes:
	// about a millisecond of the writer's time.
	defaultRetentionBatch = 500
	// retentionPause is the writer's free time between two batches.
	retentionPause = 5 * time.Millisecond
)

func (db *DB) startRetention() {
	if db.opts.Retention > 0 {
		db.retention = retention.Start(db.opts.Retention, db.opts.RetentionEvery, db.DeleteBefore)
	}
}

// DeleteBefore deletes every message stamped before cutoff, in small
// transactions of the writer, and returns how many it deleted. It relies
// on a conversation's timestamps growing with its seqs (the writer stamps
// messages in commit order): each conversation is cut from its oldest
// message up to the first one at or after cutoff, and never beyond, so a
// clock that stepped back never costs a message inside the window.
func (db *DB) DeleteBefore(ctx context.Context, cutoff time.Time) (int64, error) {
	before := cutoff.UnixMilli()
	batch := db.opts.RetentionBatch
	if batch <= 0 {
		batch = defaultRetentionBatch
	}
	// Conversations whose oldest message is old enough; the first row of
	// each is one b-tree descent of the primary key.
	rows, err := db.readers.QueryContext(ctx, `SELECT c.id FROM conversations c JOIN ids k ON k.id = c.id
		WHERE (SELECT ts FROM messages m WHERE m.conv = k.key ORDER BY seq LIMIT 1) < ?`, before)
	if err != nil {
		return 0, err
	}
	var convs []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return 0, err
		}
		convs = append(convs, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	var total int64
	for _, conv := range convs {
		for {
			var n int64
			more := false
			err := db.w.exec(ctx, func(t *wtx) error {
				n, more = 0, false
				key, err := t.key(conv, false)
				if err != nil {
					return err
				}
				// The oldest batch of the conversation, in seq order; the
				// cut ends before the first message inside the window.
				rs, err := t.QueryContext(t.ctx, `SELECT seq, ts, id, kind, body, COALESCE(stale, '') FROM messages WHERE conv = ? ORDER BY seq LIMIT ?`, key, batch)
				if err != nil {
					return err
				}
				type indexed struct {
					doc  int64
					body string
				}
				var docs []indexed
				var last int64
				seen := 0
				for rs.Next() {
					var seq, ts, id int64
					var kind, body, stale string
					if err := rs.Scan(&seq, &ts, &id, &kind, &body, &stale); err != nil {
						rs.Close()
						return err
					}
					seen++
					if ts >= before {
						break
					}
					last = seq
					n++
					if kind == chat.KindText {
						// The index holds the body's words and the stale ones.
						docs = append(docs, indexed{id, target{body: body, stale: stale}.held()})
					}
				}
				rs.Close()
				if err := rs.Err(); err != nil {
					return err
				}
				if n == 0 {
					return nil
				}
				more = seen == batch && int(n) == batch
				// What hangs off the deleted messages goes with them: their
				// search entries (a contentless index needs the old text),
				// reactions, mention rows and unread exclusions.
				for _, d := range docs {
					t.w.forget(t, d.doc, d.body)
				}
				// Their attachments too: the links, and the bytes of files
				// no other message holds (unlinked after the commit).
				if err := eraseAttachmentsBefore(t, conv, last); err != nil {
					return err
				}
				for _, q := range []string{
					`DELETE FROM reactions WHERE conv_id = ?1 AND target <= ?2`,
					`DELETE FROM uncounted WHERE conv_id = ?1 AND seq <= ?2`,
					`DELETE FROM mentions WHERE user_id IN (SELECT user_id FROM members WHERE conv_id = ?1) AND conv_id = ?1 AND seq <= ?2`,
				} {
					if _, err := t.ExecContext(t.ctx, q, conv, last); err != nil {
						return err
					}
				}
				if err := dedupForget(t, key, last); err != nil {
					return err
				}
				// The writer's live set may hold some of them (live.go);
				// the count of mutations at the cut stays (muts.go).
				t.live.reset(t.w.live)
				if _, err := t.ExecContext(t.ctx, `UPDATE conversations SET muts_cut = COALESCE((SELECT muts FROM messages
					WHERE conv = ?1 AND seq <= ?2 AND muts IS NOT NULL ORDER BY seq DESC LIMIT 1), muts_cut) WHERE id = ?3`, key, last, conv); err != nil {
					return err
				}
				// A member's own texts past its marker leave its own_unread
				// with their rows: read recounts it from the rows, and an
				// expired seq counts like any other (muts_cut, uncounted).
				if _, err := t.ExecContext(t.ctx, `UPDATE members SET own_unread = own_unread - (SELECT COUNT(*) FROM messages
					WHERE conv = ?1 AND seq > MAX(members.read_seq, members.min_seq - 1) AND seq <= MIN(?2, COALESCE(members.max_seq, ?2))
					AND sender = (SELECT key FROM ids WHERE id = members.user_id) AND kind = 'text' AND deleted IS NULL)
					WHERE conv_id = ?3 AND own_unread > 0`, key, last, conv); err != nil {
					return err
				}
				if _, err := t.ExecContext(t.ctx, `DELETE FROM messages WHERE conv = ? AND seq <= ?`, key, last); err != nil {
					return err
				}
				return nil
			})
			if err != nil {
				return total, err
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
