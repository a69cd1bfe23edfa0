package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/imserver/imserver/chat"
)

// Append implements chat.MessageStore.
func (db *DB) Append(ctx context.Context, m chat.Message) chat.Pending {
	j := &job{msg: m}
	if err := db.w.enqueue(ctx, j); err != nil {
		return func() (chat.Message, bool, error) { return chat.Message{}, false, err }
	}
	return func() (chat.Message, bool, error) {
		r := j.wait(ctx)
		return r.msg, r.dup, r.err
	}
}

func (w *writer) appendMessage(t *wtx, j *job) error {
	if !j.sender.member {
		// A retry of what the sender stored while a member gets the first
		// answer, even now ("retries get the first seq").
		if found, err := w.formerDuplicate(t, j); found || err != nil {
			return err
		}
		j.r = result{err: chat.Errorf(chat.ENotMember, "not a member of this conversation")}
		return nil
	}
	if j.msg.RetryOnly != nil {
		if found, err := w.findDuplicate(t, j, j.msg); found || err != nil {
			return err
		}
		j.r = result{err: j.msg.RetryOnly}
		return nil
	}
	c := j.conv
	if c.r.err != nil {
		j.r = result{err: c.r.err}
		return nil
	}
	m := j.msg
	m.Seq = c.r.next
	m.TS = w.opts.Clock()
	if hasExtras(&m) || len(m.Attachments) > 0 {
		return w.appendExtras(t, j, m)
	}
	// Taking the hash's first slot in the dedup levels, all its slots
	// free, decides duplicates: a look-up in memory (and in the filter of
	// the levels on file) for the common case, a statement only for a
	// retry or a filter's false positive.
	h, id, claimed, err := claimFirst(t, j.sender.convKey, j.sender.userKey, m.ClientMsgID, m.Seq)
	if err != nil {
		return err
	}
	if !claimed {
		// A retry, or (at 2^-64) another client_msg_id with the same
		// hash: the slow path tells them apart.
		if found, err := w.findDuplicate(t, j, m); found || err != nil {
			return err
		}
		if id, err = insertFull(t, j, &m); err != nil {
			return err
		}
	} else {
		muts, err := t.mutsFor(c, m.Kind)
		if err != nil {
			return err
		}
		ins, err := t.stmt(`INSERT INTO messages (conv, seq, sender, cmid_hash, client_msg_id, kind, body, ts, id, muts) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
		if err != nil {
			return err
		}
		a := &t.w.insertArgs
		a[0].Value, a[1].Value, a[2].Value, a[3].Value, a[4].Value, a[5].Value, a[6].Value, a[7].Value, a[8].Value, a[9].Value = j.sender.convKey, m.Seq, j.sender.userKey, h, m.ClientMsgID, m.Kind, m.Body, m.TS, id, muts
		_, err = ins.exec.ExecContext(t.ctx, a[:])
		for i := range a {
			a[i].Value = nil // keep no message alive
		}
		if err != nil {
			return err
		}
	}
	if indexed(&m) {
		w.index(t, id, m.Body)
	}
	w.appended(t, j, m)
	return nil
}

// indexed reports whether m goes into the search index: text with a body.
func indexed(m *chat.Message) bool {
	return m.Kind == chat.KindText && m.Body != ""
}

// appended records a stored message in the transaction and answers j.
func (w *writer) appended(t *wtx, j *job, m chat.Message) {
	c := j.conv
	c.r.next++
	if c.max == 0 {
		t.touched = append(t.touched, c)
	}
	c.max = m.Seq
	if m.Kind == chat.KindText {
		j.sender.own++
		t.live.added = append(t.live.added, [2]int64{c.key, m.Seq})
	}
	m.RosterV = j.sender.rosterV
	t.committed = append(t.committed, m)
	m.Origin = ""
	j.r = result{msg: m}
}

// appendExtras stores a mutation, a reply, a message with mentions or
// with attachments. A retry gets the first result even where the send
// would now be refused (the target deleted since).
func (w *writer) appendExtras(t *wtx, j *job, m chat.Message) error {
	// A mutation (no search document, no files) is stored first, in its
	// hash's first slot, as a plain text is: the claim then tells a new
	// one (nearly all) from a retry without a look-up, and a
	// refusal takes the row out again (unstore). Anything else, and a
	// mutation whose slot is taken, looks for a retry first.
	fresh := false
	var id int64 // the row's
	if m.Kind != chat.KindText && len(m.Attachments) == 0 {
		h, claimed, ok, err := claimFirst(t, j.sender.convKey, j.sender.userKey, m.ClientMsgID, m.Seq)
		if err == nil && ok {
			err = insertRow(t, j, &m, h, claimed)
		}
		if err != nil {
			return err
		}
		fresh, id = ok, claimed
	}
	if !fresh {
		if found, err := w.findDuplicate(t, j, m); found || err != nil {
			return err
		}
	}
	tg, err := w.checkExtras(t, j, &m)
	var files []chat.File
	if err == nil && len(m.Attachments) > 0 {
		files, err = w.attachable(t, &m)
	}
	if err == nil && m.Kind == chat.KindReaction {
		err = react(t, &m)
	}
	if err != nil {
		var e *chat.Error
		if errors.As(err, &e) {
			if fresh {
				if err := unstore(t, j, &m); err != nil {
					return err
				}
			}
			j.r = result{err: e}
			return nil
		}
		return err
	}
	if !fresh {
		if id, err = insertFull(t, j, &m); err != nil {
			return err
		}
	}
	if files != nil {
		if err := w.linkFiles(t, &m, files); err != nil {
			return err
		}
	}
	if err := w.applyExtras(t, j, &m, tg); err != nil {
		return err
	}
	if indexed(&m) {
		w.index(t, id, m.Body)
	}
	w.appended(t, j, m)
	return nil
}

// unstore removes the row appendExtras stored for m before refusing it:
// a refused send stores nothing.
func unstore(t *wtx, j *job, m *chat.Message) error {
	st, err := t.stmt(`DELETE FROM messages WHERE conv = ? AND seq = ?`)
	if err != nil {
		return err
	}
	if _, err = st.ExecContext(t.ctx, j.sender.convKey, m.Seq); err != nil {
		return err
	}
	j.conv.muts-- // it was counted (mutsFor)
	// Its slot, the hash's first, was claimed in this transaction: it
	// is in the level in memory, not yet committed.
	return dedupUnclaim(t, j.sender.convKey, j.sender.userKey, cmidHash(m.ClientMsgID))
}

// findDuplicate answers j with the message stored earlier under its
// client_msg_id, if there is one.
func (w *writer) findDuplicate(t *wtx, j *job, m chat.Message) (bool, error) {
	// Every slot of the hash in every dedup level, and the stored text
	// decides: a different client_msg_id that took one of them is not
	// this one.
	find, err := t.stmt(dedupFindSQL)
	if err != nil {
		return false, err
	}
	s := cmidSlots(m.ClientMsgID)
	mem, err := memSlots(t, j.sender.convKey, j.sender.userKey, s)
	if err != nil {
		return false, err
	}
	prev, err := scanMessage(find.QueryRowContext(t.ctx, j.sender.convKey, j.sender.userKey, s[0], s[1], s[2], s[3], m.ClientMsgID, mem[0], mem[1], mem[2], mem[3]), m.Conv, func(int64) (string, error) { return m.From, nil })
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	if err := w.storedFiles(t, &prev); err != nil {
		return false, err
	}
	j.r = result{msg: prev, dup: true}
	return true, nil
}

// formerDuplicate is findDuplicate for a sender who is not a member now.
// Without keys (never sent here) there is nothing to find, and none is
// made: a stranger's sends cannot fill the ids table.
func (w *writer) formerDuplicate(t *wtx, j *job) (bool, error) {
	ck, err := t.key(j.sender.conv, false)
	if err != nil || ck == noKey {
		return false, err
	}
	uk, err := t.key(j.sender.user, false)
	if err != nil || uk == noKey {
		return false, err
	}
	j.sender.convKey, j.sender.userKey = ck, uk
	return w.findDuplicate(t, j, j.msg)
}

// messageColumns are the columns scanMessage reads.
const messageColumns = `seq, sender, client_msg_id, kind, body, ts, target, emoji, reaction_on, reply_to, mentions, edited_at, deleted`

// scanMessage reads a row of messageColumns; sender names the sender's key.
func scanMessage(s scanner, conv string, sender func(int64) (string, error)) (chat.Message, error) {
	m := chat.Message{Conv: conv}
	var target, on, replyTo, editedAt, deleted sql.NullInt64
	var emoji, mentions sql.NullString
	var from int64
	if err := s.Scan(&m.Seq, &from, &m.ClientMsgID, &m.Kind, &m.Body, &m.TS, &target, &emoji, &on, &replyTo, &mentions, &editedAt, &deleted); err != nil {
		return m, err
	}
	var err error
	if m.From, err = sender(from); err != nil {
		return m, err
	}
	m.Target, m.Emoji, m.ReplyTo, m.EditedAt = target.Int64, emoji.String, replyTo.Int64, editedAt.Int64
	m.Deleted = deleted.Int64 != 0
	if on.Valid {
		b := on.Int64 != 0
		m.On = &b
	}
	if mentions.String != "" {
		m.Mentions = strings.Fields(mentions.String)
	}
	return m, nil
}

// finishMessages moves each conversation's max_seq and version once per
// batch, and counts the senders' texts in their own_unread (unread counts
// the text messages of others: a send moves no read marker). Each table
// gets one statement for up to 64 rows (updateRows): one message in flight
// per sender makes a batch of as many conversations as messages, and a
// statement per row cost more than the rows' changes.
func (w *writer) finishMessages(t *wtx) error {
	if len(t.touched) == 0 {
		return nil
	}
	args := t.w.finishArgs[:0]
	defer func() {
		clear(args[:cap(args)]) // keep no id alive
		t.w.finishArgs = args[:0]
	}()
	// In commit order, so that versions follow it.
	for _, c := range t.touched {
		v, err := t.nextVersion()
		if err != nil {
			return err
		}
		args = append(args, c.id, c.max, v, c.muts)
	}
	if err := updateRows(t, finishConvs, args); err != nil {
		return err
	}
	args = args[:0]
	for _, s := range t.senders {
		if s.own != 0 {
			args = append(args, s.conv, s.user, s.own)
			s.own = 0
		}
	}
	return updateRows(t, finishSenders, args)
}

// rowsUpdate is an UPDATE of many rows, each given by a row of values,
// prepared for each of updateRowsSizes.
type rowsUpdate struct {
	width   int // values per row
	queries [len(updateRowsSizes)]string
}

// updateRowsSizes are the row counts statements are prepared for; a
// statement's rows past the given ones are NULLs, which match no row.
var updateRowsSizes = [...]int{1, 4, 16, 64}

// newRowsUpdate makes the statements of q, an UPDATE ending in
// FROM (VALUES %s) AS v WHERE ..., for rows of width values.
func newRowsUpdate(width int, q string) rowsUpdate {
	u := rowsUpdate{width: width}
	row := "(?" + strings.Repeat(", ?", width-1) + ")"
	for i, n := range updateRowsSizes {
		u.queries[i] = fmt.Sprintf(q, row+strings.Repeat(", "+row, n-1))
	}
	return u
}

var (
	finishConvs = newRowsUpdate(4, `UPDATE conversations SET max_seq = v.column2, version = v.column3, muts = v.column4
		FROM (VALUES %s) AS v WHERE conversations.id = v.column1`)
	finishSenders = newRowsUpdate(3, `UPDATE members SET own_unread = own_unread + v.column3
		FROM (VALUES %s) AS v WHERE members.conv_id = v.column1 AND members.user_id = v.column2`)
)

// updateRows runs u for the rows in args (u.width values each), in
// statements of at most 64 rows.
func updateRows(t *wtx, u rowsUpdate, args []any) error {
	for len(args) > 0 {
		rows := len(args) / u.width
		i := 0
		for i < len(updateRowsSizes)-1 && updateRowsSizes[i] < rows {
			i++
		}
		size := updateRowsSizes[i]
		take := min(rows, size) * u.width
		st, err := t.stmt(u.queries[i])
		if err != nil {
			return err
		}
		vals := make([]any, size*u.width)
		copy(vals, args[:take])
		if _, err := st.ExecContext(t.ctx, vals...); err != nil {
			return err
		}
		args = args[take:]
	}
	return nil
}

// beforeFunc readies the transaction for a function job. Such a job
// (joining, kicking, leaving, clearing) reads conversations.max_seq to set
// visible ranges, so the messages appended before it in this transaction
// are written there first; and it may change who is a member, so
// membership is read again for the messages after it. The search index's
// pending writes are made first too (applyFTS).
func (w *writer) beforeFunc(t *wtx, j *job) error {
	if err := w.applyFTS(t); err != nil {
		return err
	}
	var st *wstmt
	for _, c := range t.touched {
		if c.max == c.stored {
			continue
		}
		if st == nil {
			var err error
			if st, err = t.stmt(`UPDATE conversations SET max_seq = ? WHERE id = ?`); err != nil {
				return err
			}
		}
		if _, err := st.ExecContext(t.ctx, c.max, c.id); err != nil {
			return err
		}
		c.stored = c.max
	}
	if j.keepsMembers {
		return nil
	}
	for _, s := range t.senders {
		s.checked = false
	}
	w.members.reset()
	t.memberReads = t.memberReads[:0]
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
	key, err := db.lookupKey(ctx, tx, conv)
	if err != nil {
		return chat.Page{}, err
	}
	var rows *sql.Rows
	if q.Backward {
		rows, err = tx.QueryContext(ctx, `SELECT `+messageColumns+` FROM messages
			WHERE conv = ? AND seq < ? AND seq >= ? ORDER BY seq DESC LIMIT ?`, key, min(q.Before, hi+1), lo, q.Limit+1)
	} else {
		rows, err = tx.QueryContext(ctx, `SELECT `+messageColumns+` FROM messages
			WHERE conv = ? AND seq > ? AND seq <= ? ORDER BY seq LIMIT ?`, key, max(q.After, lo-1), hi, q.Limit+1)
	}
	if err != nil {
		return chat.Page{}, err
	}
	defer rows.Close()
	for rows.Next() {
		m, err := scanMessage(rows, conv, db.senderOf(ctx, tx))
		if err != nil {
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
	if err := foldReactions(ctx, tx, conv, page.Messages); err != nil {
		return chat.Page{}, err
	}
	if err := db.pageFiles(ctx, tx, conv, page.Messages); err != nil {
		return chat.Page{}, err
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
