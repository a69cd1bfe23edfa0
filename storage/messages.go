package storage

import (
	"context"
	"database/sql"
	"errors"

	"github.com/imserver/imserver/chat"
)

// Append implements chat.MessageStore.
func (db *DB) Append(ctx context.Context, m chat.Message) chat.Pending {
	wait := db.w.enqueue(ctx, &job{msg: &m})
	return func() (chat.Message, bool, error) {
		r := wait()
		return r.msg, r.dup, r.err
	}
}

func (w *writer) appendMessage(t *wtx, j *job) error {
	m := *j.msg
	if t.notMember[[2]string{m.Conv, m.From}] {
		t.results[j] = result{err: chat.Errorf(chat.ENotMember, "not a member of this conversation")}
		return nil
	}
	r := t.ranges[m.Conv]
	if r.err != nil {
		t.results[j] = result{err: r.err}
		return nil
	}
	m.Seq = r.next
	m.TS = nowMS()
	// The unique index decides duplicates: one statement for the common
	// case, a look-up only for a retry.
	ins, err := t.stmt(`INSERT INTO messages (conv_id, seq, sender_id, client_msg_id, kind, body, ts) VALUES (?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (conv_id, sender_id, client_msg_id) DO NOTHING`)
	if err != nil {
		return err
	}
	res, err := ins.ExecContext(t.ctx, m.Conv, m.Seq, m.From, m.ClientMsgID, m.Kind, m.Body, m.TS)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return w.duplicate(t, j, m)
	}
	r.next++
	t.convMax[m.Conv] = m.Seq
	t.senderMax[[2]string{m.Conv, m.From}] = m.Seq
	t.committed = append(t.committed, m)
	stored := m
	stored.Origin = ""
	t.results[j] = result{msg: stored}
	return nil
}

// duplicate answers j with the message stored earlier under its
// client_msg_id.
func (w *writer) duplicate(t *wtx, j *job, m chat.Message) error {
	find, err := t.stmt(`SELECT seq, kind, body, ts FROM messages WHERE conv_id = ? AND sender_id = ? AND client_msg_id = ?`)
	if err != nil {
		return err
	}
	prev := m
	prev.Origin = ""
	if err := find.QueryRowContext(t.ctx, m.Conv, m.From, m.ClientMsgID).Scan(&prev.Seq, &prev.Kind, &prev.Body, &prev.TS); err != nil {
		return err
	}
	t.results[j] = result{msg: prev, dup: true}
	return nil
}

// finishMessages moves each conversation's max_seq and version once per
// batch, and the senders' own markers: whoever sends has read what came
// before.
func (w *writer) finishMessages(t *wtx) error {
	if len(t.convMax) == 0 {
		return nil
	}
	conv, err := t.stmt(`UPDATE conversations SET max_seq = ?, version = ? WHERE id = ?`)
	if err != nil {
		return err
	}
	// Iterate in commit order so versions follow it.
	seen := make(map[string]bool, len(t.convMax))
	for _, m := range t.committed {
		if seen[m.Conv] {
			continue
		}
		seen[m.Conv] = true
		v, err := t.nextVersion()
		if err != nil {
			return err
		}
		if _, err := conv.ExecContext(t.ctx, t.convMax[m.Conv], v, m.Conv); err != nil {
			return err
		}
	}
	sender, err := t.stmt(`UPDATE members SET read_seq = MAX(read_seq, ?1), last_ack_seq = MAX(last_ack_seq, ?1) WHERE conv_id = ?2 AND user_id = ?3`)
	if err != nil {
		return err
	}
	for k, s := range t.senderMax {
		if _, err := sender.ExecContext(t.ctx, s, k[0], k[1]); err != nil {
			return err
		}
	}
	return nil
}

// Messages implements chat.MessageStore.
func (db *DB) Messages(ctx context.Context, conv, user string, q chat.PageQuery) (chat.Page, error) {
	tx, err := db.readers.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return chat.Page{}, err
	}
	defer tx.Rollback()
	var lo, hi int64
	err = tx.QueryRowContext(ctx, `SELECT m.min_seq, COALESCE(m.max_seq, c.max_seq)
		FROM conversations c JOIN members m ON m.conv_id = c.id AND m.user_id = ? WHERE c.id = ?`, user, conv).Scan(&lo, &hi)
	if errors.Is(err, sql.ErrNoRows) {
		return chat.Page{}, db.missingMember(ctx, tx, conv)
	} else if err != nil {
		return chat.Page{}, err
	}
	page := chat.Page{Messages: []chat.Message{}, MaxSeq: hi}
	var rows *sql.Rows
	if q.Backward {
		rows, err = tx.QueryContext(ctx, `SELECT seq, sender_id, client_msg_id, kind, body, ts FROM messages
			WHERE conv_id = ? AND seq < ? AND seq >= ? ORDER BY seq DESC LIMIT ?`, conv, min(q.Before, hi+1), lo, q.Limit+1)
	} else {
		rows, err = tx.QueryContext(ctx, `SELECT seq, sender_id, client_msg_id, kind, body, ts FROM messages
			WHERE conv_id = ? AND seq > ? AND seq <= ? ORDER BY seq LIMIT ?`, conv, max(q.After, lo-1), hi, q.Limit+1)
	}
	if err != nil {
		return chat.Page{}, err
	}
	defer rows.Close()
	for rows.Next() {
		m := chat.Message{Conv: conv}
		if err := rows.Scan(&m.Seq, &m.From, &m.ClientMsgID, &m.Kind, &m.Body, &m.TS); err != nil {
			return chat.Page{}, err
		}
		page.Messages = append(page.Messages, m)
	}
	if err := rows.Err(); err != nil {
		return chat.Page{}, err
	}
	page.Completed = len(page.Messages) <= q.Limit
	if !page.Completed {
		page.Messages = page.Messages[:q.Limit]
	}
	if q.Backward {
		for i, j := 0, len(page.Messages)-1; i < j; i, j = i+1, j-1 {
			page.Messages[i], page.Messages[j] = page.Messages[j], page.Messages[i]
		}
	}
	return page, nil
}

// missingMember tells not_found (no such conversation) from not_member.
func (db *DB) missingMember(ctx context.Context, q queryRower, conv string) error {
	var n int
	if err := q.QueryRowContext(ctx, `SELECT COUNT(*) FROM conversations WHERE id = ?`, conv).Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		return chat.Errorf(chat.ENotFound, "conversation not found")
	}
	return chat.Errorf(chat.ENotMember, "not a member of this conversation")
}
