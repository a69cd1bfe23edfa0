package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/imserver/imserver/chat"
)

// What the writer does beyond inserting a plain text message: mutations
// (edit, delete, reaction), replies and mentions. Everything that depends
// on the target's current state is decided here, inside the write
// transaction, so that two mutations of one message in one batch see each
// other (a delete after an edit, a reaction after a delete). A refusal
// stores nothing and leaves the seq to the next message.

// hasExtras reports whether m needs more than the plain insert.
func hasExtras(m *chat.Message) bool {
	return m.Kind != chat.KindText || m.ReplyTo != 0 || len(m.Mentions) > 0
}

// target is the current state of a mutation's target.
type target struct {
	from     int64 // the sender's key
	kind     string
	body     string
	mentions string
	deleted  bool
	id       int64  // the row's, its search document's number
	stale    string // words the index holds beyond body (migration 0008)
}

// held is the text whose words the search index holds for tg, "" for
// none (a message with no body is not indexed). Messages at or below
// search_backfill.pending are not indexed yet whatever they hold
// (applyFTS leaves them alone).
func (tg target) held() string {
	if tg.stale == "" {
		return tg.body
	}
	return tg.body + " " + tg.stale
}

// loadTarget reads seq of conv as the sender may see it: not_found when it
// does not exist, is not a text message or lies before the sender's
// visible range (the sender is a member, so nothing stored lies after it).
func loadTarget(t *wtx, s *senderTx, conv string, seq int64) (target, error) {
	var tg target
	if seq < s.minSeq {
		return tg, chat.Errorf(chat.ENotFound, "message %d not found", seq)
	}
	st, err := t.stmt(`SELECT sender, kind, body, COALESCE(mentions, ''), COALESCE(deleted, 0), id, COALESCE(stale, '') FROM messages WHERE conv = ? AND seq = ?`)
	if err != nil {
		return tg, err
	}
	err = st.QueryRowContext(t.ctx, s.convKey, seq).Scan(&tg.from, &tg.kind, &tg.body, &tg.mentions, &tg.deleted, &tg.id, &tg.stale)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && tg.kind != chat.KindText) {
		return tg, chat.Errorf(chat.ENotFound, "message %d not found", seq)
	}
	return tg, err
}

// checkReplyTo says whether a reply may name seq: any message the sender
// may see, of any kind (PROTOCOL.md v1.1: reply_to is the "seq of a
// message of the same conversation", refused only when it does not exist
// or lies outside the sender's visible range), unlike a mutation's target,
// which must be a text message.
func checkReplyTo(t *wtx, s *senderTx, seq int64) error {
	if seq >= s.minSeq {
		st, err := t.stmt(`SELECT 1 FROM messages WHERE conv = ? AND seq = ?`)
		if err != nil {
			return err
		}
		var one int
		err = st.QueryRowContext(t.ctx, s.convKey, seq).Scan(&one)
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
	}
	return chat.Errorf(chat.ENotFound, "message %d not found", seq)
}

// checkExtras decides whether j's message may be stored; a refusal is
// returned as a *chat.Error, anything else is a failure of the batch. It
// returns the target's state for applyExtras.
func (w *writer) checkExtras(t *wtx, j *job, m *chat.Message) (target, error) {
	if m.Kind == chat.KindText {
		if m.ReplyTo == 0 || w.isLive(j, m.ReplyTo) {
			return target{}, nil
		}
		return target{}, checkReplyTo(t, j.sender, m.ReplyTo)
	}
	if m.Kind == chat.KindReaction && w.isLive(j, m.Target) {
		// All a reaction asks of its target (react decides the rest).
		return target{}, nil
	}
	tg, err := loadTarget(t, j.sender, m.Conv, m.Target)
	if err != nil {
		return tg, err
	}
	switch m.Kind {
	case chat.KindEdit:
		if tg.from != j.sender.userKey {
			return tg, chat.Errorf(chat.EForbidden, "only its sender may edit a message")
		}
	case chat.KindDelete:
		if tg.from != j.sender.userKey {
			role := j.sender.role
			if j.conv.kind(t) != chat.Group || (role != chat.RoleOwner && role != chat.RoleAdmin) {
				return tg, chat.Errorf(chat.EForbidden, "only its sender, or a group's owner or admin, may delete a message")
			}
		}
	}
	if tg.deleted {
		return tg, chat.Errorf(chat.EConflict, "message %d was deleted", m.Target)
	}
	return tg, nil
}

// isLive reports whether seq is known to be a live text message the
// sender may see, without reading it (live.go).
func (w *writer) isLive(j *job, seq int64) bool {
	return seq >= j.sender.minSeq && w.live.has(j.conv.key, seq)
}

// react adds or takes back m's reaction, after every other check of m:
// one statement both decides and does it, and a reaction that would
// change nothing (no row added or removed) is refused, having changed
// nothing.
func react(t *wtx, m *chat.Message) error {
	q := `DELETE FROM reactions WHERE conv_id = ? AND target = ? AND emoji = ? AND user_id = ?`
	args := []any{m.Conv, m.Target, m.Emoji, m.From}
	if *m.On {
		// An entry that is there keeps its place (run, migration 0017).
		q = `INSERT INTO reactions (conv_id, target, emoji, user_id, seq, run) VALUES (?1, ?2, ?3, ?4, ?5,
			COALESCE((SELECT MIN(COALESCE(run, seq)) FROM reactions WHERE conv_id = ?1 AND target = ?2 AND emoji = ?3), ?5)) ON CONFLICT DO NOTHING`
		args = append(args, m.Seq)
	}
	st, err := t.stmt(q)
	if err != nil {
		return err
	}
	res, err := st.ExecContext(t.ctx, args...)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return chat.Errorf(chat.EConflict, "the reaction would change nothing")
	}
	return nil
}

// kind returns the conversation's kind, read once per transaction.
func (c *convTx) kind(t *wtx) string {
	if c.kindName == "" {
		st, err := t.stmt(`SELECT kind FROM conversations WHERE id = ?`)
		if err == nil {
			err = st.QueryRowContext(t.ctx, c.id).Scan(&c.kindName)
		}
		if err != nil {
			return ""
		}
	}
	return c.kindName
}

// insertFull stores a message with the v1.1 columns, in the first free
// slot of its client_msg_id's hash (cmidSlots): the caller found no
// message stored under that client_msg_id, so a taken slot holds another.
// It returns the row's id.
func insertFull(t *wtx, j *job, m *chat.Message) (int64, error) {
	slots := cmidSlots(m.ClientMsgID)
	if id, ok, err := insertSlots(t, j, m, slots[:]); ok || err != nil {
		return id, err
	}
	return 0, fmt.Errorf("storage: %d other client_msg_ids of this sender share the hash of %q", cmidProbes, m.ClientMsgID)
}

// insertSlots stores m in the first of slots that is free in the dedup
// levels (claimSlot) and returns its id; false when every one is taken.
func insertSlots(t *wtx, j *job, m *chat.Message, slots []int64) (int64, bool, error) {
	for i, h := range slots {
		id, ok, err := claimSlot(t, j.sender.convKey, j.sender.userKey, h, m.Seq, i > 0)
		if err != nil {
			return 0, false, err
		}
		if !ok {
			continue
		}
		err = insertRow(t, j, m, h, id)
		return id, err == nil, err
	}
	return 0, false, nil
}

// insertRow stores m's row, of id, under slot h, which it has claimed.
func insertRow(t *wtx, j *job, m *chat.Message, h, id int64) error {
	muts, err := t.mutsFor(j.conv, m.Kind)
	if err != nil {
		return err
	}
	ins, err := t.stmt(`INSERT INTO messages (conv, seq, sender, cmid_hash, client_msg_id, kind, body, ts, target, emoji, reaction_on, reply_to, mentions, id, muts)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return err
	}
	_, err = ins.ExecContext(t.ctx, j.sender.convKey, m.Seq, j.sender.userKey, h, m.ClientMsgID, m.Kind, m.Body, m.TS,
		nullInt(m.Target), nullString(m.Emoji), nullBool(m.On), nullInt(m.ReplyTo), nullString(strings.Join(m.Mentions, " ")), id, muts)
	return err
}

// applyExtras applies a stored message to the state it changes.
func (w *writer) applyExtras(t *wtx, j *job, m *chat.Message, tg target) error {
	if m.Kind == chat.KindText {
		return addMentions(t, m.Conv, m.Seq, m.Mentions, m.From)
	}
	// A mutation is not a message unread counts: its row's count of
	// mutations (muts.go) says so.
	switch m.Kind {
	case chat.KindEdit:
		if err := touchFormer(t, m.Conv, m.Target); err != nil {
			return err
		}
		return w.applyEdit(t, j, m, tg)
	case chat.KindDelete:
		if err := touchFormer(t, m.Conv, m.Target); err != nil {
			return err
		}
		return w.applyDelete(t, j, m, tg)
	}
	// A reaction's own change was made by react; no entry shows it.
	return nil
}

// touchFormer gives a new version to the entries of the former members
// who see seq: their pulls fold its edit or delete, and their entry's
// last_message, unread and mentions may follow it. A member's entry
// follows the conversation's version, which the mutation itself moves.
func touchFormer(t *wtx, conv string, seq int64) error {
	v, err := t.nextVersion()
	if err != nil {
		return err
	}
	st, err := t.stmt(`UPDATE members INDEXED BY members_former SET version = ?
		WHERE conv_id = ? AND max_seq IS NOT NULL AND max_seq >= ? AND min_seq <= ?`)
	if err != nil {
		return err
	}
	_, err = st.ExecContext(t.ctx, v, conv, seq, seq)
	return err
}

func (w *writer) applyEdit(t *wtx, j *job, m *chat.Message, tg target) error {
	// An indexed ASCII text edited into ASCII keeps the words it loses in
	// the index (stale, migration 0008): only a delete must erase them,
	// and search checks an edited message's body. Anything else has its
	// old words removed from the index now.
	pending, err := t.unindexed()
	if err != nil {
		return err
	}
	held := tg.held()
	extend, stale := false, ""
	if held != "" && tg.id > pending {
		if hw, ok := asciiWords(held); ok {
			if nw, ok := asciiWords(m.Body); ok {
				extend, stale = true, missing(hw, nw)
			}
		}
	}
	st, err := t.stmt(`UPDATE messages SET body = ?, edited_at = ?, mentions = ?, stale = ? WHERE conv = ? AND seq = ?`)
	if err != nil {
		return err
	}
	if _, err := st.ExecContext(t.ctx, m.Body, m.TS, nullString(strings.Join(m.Mentions, " ")), nullString(stale), j.conv.key, m.Target); err != nil {
		return err
	}
	if err := dropMentions(t, m.Conv, m.Target, tg.mentions); err != nil {
		return err
	}
	if err := addMentions(t, m.Conv, m.Target, m.Mentions, m.From); err != nil {
		return err
	}
	switch {
	case held == "":
		// Not in the index (a text with no body): it is now.
		w.index(t, tg.id, m.Body)
	case extend:
		w.extend(t, tg.id, held, m.Body)
	default:
		w.replace(t, tg.id, held, m.Body)
	}
	return nil
}

// applyDelete erases the target's content: its body, the bodies of its
// edits, its reactions (and the emoji of the reaction messages), its
// mentions and its search entry. With secure_delete on, the freed bytes
// are zeroed in the database file; the WAL frames that still hold them go
// at the next truncating checkpoint (DB.Close).
func (w *writer) applyDelete(t *wtx, j *job, m *chat.Message, tg target) error {
	t.live.forget(w.live, j.conv.key, m.Target)
	st, err := t.stmt(`UPDATE messages SET body = '', deleted = 1, mentions = NULL, stale = NULL WHERE conv = ? AND seq = ?`)
	if err != nil {
		return err
	}
	if _, err := st.ExecContext(t.ctx, j.conv.key, m.Target); err != nil {
		return err
	}
	// The edits and reactions are found first and blanked one by one by
	// primary key: a multi-row UPDATE opens a statement savepoint, and FTS5
	// flushes its pending inserts to a new index segment at every
	// savepoint, so each delete would leave one more small segment for
	// every later secure delete and query to seek. INDEXED BY: without it
	// the planner reads the whole conversation through the primary key's
	// conv_id prefix. A reaction message's emoji (up to 64 bytes of the
	// sender's choosing, ":name:" included) is erased with the reaction.
	find, err := t.stmt(`SELECT seq, kind FROM messages INDEXED BY messages_targets WHERE conv = ? AND target = ?
		AND ((kind = 'edit' AND body <> '') OR (kind = 'reaction' AND emoji IS NOT NULL))`)
	if err != nil {
		return err
	}
	rows, err := find.QueryContext(t.ctx, j.conv.key, m.Target)
	if err != nil {
		return err
	}
	var edits, reacts []int64
	for rows.Next() {
		var seq int64
		var kind string
		if err := rows.Scan(&seq, &kind); err != nil {
			rows.Close()
			return err
		}
		if kind == chat.KindEdit {
			edits = append(edits, seq)
		} else {
			reacts = append(reacts, seq)
		}
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return err
	}
	blank, err := t.stmt(`UPDATE messages SET body = '', mentions = NULL WHERE conv = ? AND seq = ?`)
	if err != nil {
		return err
	}
	for _, seq := range edits {
		if _, err := blank.ExecContext(t.ctx, j.conv.key, seq); err != nil {
			return err
		}
	}
	unnamed, err := t.stmt(`UPDATE messages SET emoji = NULL WHERE conv = ? AND seq = ?`)
	if err != nil {
		return err
	}
	for _, seq := range reacts {
		if _, err := unnamed.ExecContext(t.ctx, j.conv.key, seq); err != nil {
			return err
		}
	}
	reactions, err := t.stmt(`DELETE FROM reactions WHERE conv_id = ? AND target = ?`)
	if err != nil {
		return err
	}
	if _, err := reactions.ExecContext(t.ctx, m.Conv, m.Target); err != nil {
		return err
	}
	if err := dropMentions(t, m.Conv, m.Target, tg.mentions); err != nil {
		return err
	}
	if err := uncount(t, m.Conv, m.Target); err != nil {
		return err
	}
	// Its sender counted it among its own texts past its read marker;
	// uncounted now subtracts it for everyone. A text of this
	// transaction is counted at its end (finishMessages) and is past any
	// marker.
	own, err := t.stmt(`UPDATE members SET own_unread = own_unread - 1
		WHERE conv_id = ?1 AND user_id = (SELECT id FROM ids WHERE key = ?2)
		AND ?3 > MAX(read_seq, min_seq - 1) AND (max_seq IS NULL OR ?3 <= max_seq)`)
	if err != nil {
		return err
	}
	if _, err := own.ExecContext(t.ctx, m.Conv, tg.from, m.Target); err != nil {
		return err
	}
	if err := eraseAttachments(t, m.Conv, m.Target); err != nil {
		return err
	}
	w.forget(t, tg.id, tg.held())
	return nil
}

func uncount(t *wtx, conv string, seq int64) error {
	st, err := t.stmt(`INSERT OR IGNORE INTO uncounted (conv_id, seq) VALUES (?, ?)`)
	if err != nil {
		return err
	}
	_, err = st.ExecContext(t.ctx, conv, seq)
	return err
}

func addMentions(t *wtx, conv string, seq int64, users []string, sender string) error {
	if len(users) == 0 {
		return nil
	}
	st, err := t.stmt(`INSERT OR IGNORE INTO mentions (user_id, conv_id, seq) VALUES (?, ?, ?)`)
	if err != nil {
		return err
	}
	for _, u := range users {
		if u == sender {
			continue // its own message is never unread: no row counts it
		}
		if _, err := st.ExecContext(t.ctx, u, conv, seq); err != nil {
			return err
		}
	}
	return nil
}

// dropMentions removes seq's mention rows; stored is the message's
// mentions column (space-separated ids).
func dropMentions(t *wtx, conv string, seq int64, stored string) error {
	if stored == "" {
		return nil
	}
	st, err := t.stmt(`DELETE FROM mentions WHERE user_id = ? AND conv_id = ? AND seq = ?`)
	if err != nil {
		return err
	}
	for _, u := range strings.Fields(stored) {
		if _, err := st.ExecContext(t.ctx, u, conv, seq); err != nil {
			return err
		}
	}
	return nil
}

func nullInt(v int64) any {
	if v == 0 {
		return nil
	}
	return v
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func nullBool(b *bool) any {
	if b == nil {
		return nil
	}
	if *b {
		return int64(1)
	}
	return int64(0)
}

// foldReactions fills in the current reactions of the text messages of
// msgs (ascending seqs of conv), with one range query.
func foldReactions(ctx context.Context, tx *sql.Tx, conv string, msgs []chat.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	rows, err := tx.QueryContext(ctx, `SELECT target, emoji, user_id FROM reactions
		WHERE conv_id = ? AND target BETWEEN ? AND ? ORDER BY target, COALESCE(run, seq), seq`, conv, msgs[0].Seq, msgs[len(msgs)-1].Seq)
	if err != nil {
		return err
	}
	defer rows.Close()
	i := 0
	for rows.Next() {
		var seq int64
		var emoji, user string
		if err := rows.Scan(&seq, &emoji, &user); err != nil {
			return err
		}
		for i < len(msgs) && msgs[i].Seq < seq {
			i++
		}
		if i == len(msgs) || msgs[i].Seq != seq || msgs[i].Kind != chat.KindText {
			continue
		}
		msgs[i].Reactions = addReaction(msgs[i].Reactions, emoji, user)
	}
	return rows.Err()
}

// addReaction adds user to emoji's reaction, rows coming in the order of
// their entry's first use (run) and then of their reaction messages.
func addReaction(rs []chat.Reaction, emoji, user string) []chat.Reaction {
	for k := range rs {
		if rs[k].Emoji == emoji {
			rs[k].Users = append(rs[k].Users, user)
			return rs
		}
	}
	return append(rs, chat.Reaction{Emoji: emoji, Users: []string{user}})
}
