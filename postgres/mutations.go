package postgres

import (
	"errors"
	"strings"

	"github.com/imserver/imserver/chat"
	"github.com/jackc/pgx/v5"
)

// What the writer does beyond inserting a plain text message: mutations
// (edit, delete, reaction), replies, mentions and attachments, as
// storage/mutations.go does on SQLite. Such a message is stored alone, with
// statements answered one by one, after what is queued before it: whatever
// depends on the target's current state is decided inside the write
// transaction, so that two mutations of one message in one batch see each
// other. A refusal stores nothing and leaves the seq to the next message.
// These messages are few next to plain texts, which keep the pipelined
// path (appendRun).

// needsV11 reports whether m needs more than the plain insert (the
// counterpart of storage's hasExtras, and attachments).
func needsV11(m chat.Message) bool {
	return m.Kind != chat.KindText || m.ReplyTo != 0 || len(m.Mentions) > 0 || m.Target != 0 || len(m.Attachments) > 0
}

// isV11 reports whether job j is a message for appendV11.
func isV11(j *job) bool { return j.fn == nil && needsV11(j.msg) }

// messageColumns are the columns scanMessage reads, from table alias m.
const messageColumns = `m.seq, m.sender_id, m.client_msg_id, m.kind, m.body, m.ts, m.target, m.emoji, m.reaction_on, m.reply_to, m.mentions, m.edited_at, m.deleted`

// pageColumns are messageColumns with the message's reactions, emoji and
// users in the order of their entry's first use (run) and then of their
// reaction messages (index look-ups of each
// row), and whether it has attachments: a page is one statement.
const pageColumns = messageColumns + `,
	(SELECT array_agg(r.emoji ORDER BY COALESCE(r.run, r.seq), r.seq) FROM reactions r WHERE r.conv_id = m.conv_id AND r.target = m.seq),
	(SELECT array_agg(r.user_id ORDER BY COALESCE(r.run, r.seq), r.seq) FROM reactions r WHERE r.conv_id = m.conv_id AND r.target = m.seq),
	EXISTS (SELECT 1 FROM message_files mf WHERE mf.conv_id = m.conv_id AND mf.seq = m.seq)`

// scanPageRow reads a row of pageColumns.
func scanPageRow(s pgx.Row, conv string) (chat.Message, bool, error) {
	m := chat.Message{Conv: conv}
	var emoji, users []string
	var files bool
	if err := scanInto(s, &m, nil, &emoji, &users, &files); err != nil {
		return m, false, err
	}
	if m.Kind == chat.KindText {
		for i := range min(len(emoji), len(users)) {
			m.Reactions = addReaction(m.Reactions, emoji[i], users[i])
		}
	}
	return m, files, nil
}

// scanMessage reads a row of messageColumns.
func scanMessage(s pgx.Row, conv string) (chat.Message, error) {
	m := chat.Message{Conv: conv}
	return m, scanInto(s, &m, nil)
}

// scanMessageConv reads a row of conv_id and messageColumns.
func scanMessageConv(s pgx.Row) (chat.Message, error) {
	var m chat.Message
	return m, scanInto(s, &m, &m.Conv)
}

// scanInto scans a row of first (nil for none), messageColumns and then
// more into m.
func scanInto(s pgx.Row, m *chat.Message, first any, more ...any) error {
	var target, replyTo, editedAt *int64
	var emoji, mentions *string
	var deleted *bool
	dest := make([]any, 0, 14+len(more))
	if first != nil {
		dest = append(dest, first)
	}
	dest = append(dest, &m.Seq, &m.From, &m.ClientMsgID, &m.Kind, &m.Body, &m.TS, &target, &emoji, &m.On, &replyTo, &mentions, &editedAt, &deleted)
	if err := s.Scan(append(dest, more...)...); err != nil {
		return err
	}
	m.Target, m.Emoji, m.ReplyTo, m.EditedAt = deref(target), derefS(emoji), deref(replyTo), deref(editedAt)
	m.Deleted = deleted != nil && *deleted
	if mentions != nil && *mentions != "" {
		m.Mentions = strings.Fields(*mentions)
	}
	return nil
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

func derefS(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func nullInt(v int64) *int64 {
	if v == 0 {
		return nil
	}
	return &v
}

func nullString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// target is the current state of a mutation's or reply's target.
type target struct {
	from     string
	kind     string
	mentions string
	deleted  bool
}

// appendV11 stores the message of job j (see the top of the file).
func (w *writer) appendV11(t *wtx, j *job) error {
	m := j.msg
	if !storable(m.Conv) || !storable(m.From) || !storable(m.ClientMsgID) || !storable(m.Body) || !storable(m.Kind) ||
		!storable(m.Emoji) || !storable(strings.Join(m.Mentions, " ")) {
		j.r = result{err: chat.Errorf(chat.EBadRequest, "text with a NUL byte or invalid UTF-8 cannot be stored")}
		return nil
	}
	for _, a := range m.Attachments {
		if !storable(a.ID) {
			j.r = result{err: chat.Errorf(chat.ENotFound, "attachment: file not found")}
			return nil
		}
	}
	run := []*job{j}
	w.lockConvs(t, run)
	w.checkSenders(t, run)
	if err := t.flush(); err != nil {
		return err
	}
	c := t.convs[m.Conv]
	s := t.senders[[2]string{m.Conv, m.From}]
	if c == nil {
		j.r = result{err: chat.Errorf(chat.ENotFound, "conversation not found")}
		return nil
	}
	// A retry gets the first result, even where the send would now be
	// refused (the target deleted since, the sender no longer a member).
	prev, err := scanMessage(t.QueryRow(`SELECT `+messageColumns+` FROM messages m
		WHERE m.conv_id = $1 AND m.sender_id = $2 AND m.client_msg_id = $3`, m.Conv, m.From, m.ClientMsgID), m.Conv)
	if err == nil {
		if err := w.storedFiles(t, &prev); err != nil {
			return err
		}
		j.r = result{msg: prev, dup: true}
		return nil
	} else if !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	if !s.member {
		j.r = result{err: chat.Errorf(chat.ENotMember, "not a member of this conversation")}
		return nil
	}
	if m.RetryOnly != nil {
		j.r = result{err: m.RetryOnly}
		return nil
	}
	tg, err := w.checkV11(t, c, &m)
	var files []chat.File
	if err == nil && len(m.Attachments) > 0 {
		files, err = w.attachable(t, &m)
	}
	if err != nil {
		var ce *chat.Error
		if errors.As(err, &ce) {
			j.r = result{err: ce}
			return nil
		}
		return err
	}
	first, err := w.seqs.reserve(t, c, 1)
	if err != nil {
		var ce *chat.Error
		if errors.As(err, &ce) {
			j.r = result{err: ce}
			return nil
		}
		return err
	}
	m.Seq, m.TS = first, w.opts.Clock()
	if _, err := t.Exec(`INSERT INTO messages (conv_id, seq, sender_id, client_msg_id, kind, body, ts, target, emoji, reaction_on, reply_to, mentions, search)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, NULLIF($13, '')::tsvector)`,
		m.Conv, m.Seq, m.From, m.ClientMsgID, m.Kind, m.Body, m.TS, nullInt(m.Target), nullString(m.Emoji), m.On,
		nullInt(m.ReplyTo), nullString(strings.Join(m.Mentions, " ")), searchDoc(m.Kind, m.Body)); err != nil {
		return err
	}
	if files != nil {
		if err := w.linkFiles(t, &m, files); err != nil {
			return err
		}
	}
	if err := w.applyV11(t, &m, tg); err != nil {
		return err
	}
	if c.max == 0 {
		t.touched = append(t.touched, c)
	}
	c.max = m.Seq
	if m.Kind == chat.KindText {
		s.own++
	}
	m.RosterV = c.rosterV
	t.committed = append(t.committed, m)
	m.Origin = ""
	j.r = result{msg: m}
	return nil
}

// loadTarget reads seq of conv as the sender may see it: not_found when
// it does not exist, is not a text message or lies before the sender's
// visible range (the sender is a member, so nothing stored lies after it).
func loadTarget(t *wtx, m *chat.Message, seq int64) (target, string, error) {
	var tg target
	var minSeq int64
	var role string
	if err := t.QueryRow(`SELECT min_seq, role FROM members WHERE conv_id = $1 AND user_id = $2`, m.Conv, m.From).Scan(&minSeq, &role); err != nil {
		return tg, "", err
	}
	notFound := chat.Errorf(chat.ENotFound, "message %d not found", seq)
	if seq < minSeq {
		return tg, role, notFound
	}
	err := t.QueryRow(`SELECT sender_id, kind, COALESCE(mentions, ''), COALESCE(deleted, false) FROM messages WHERE conv_id = $1 AND seq = $2`,
		m.Conv, seq).Scan(&tg.from, &tg.kind, &tg.mentions, &tg.deleted)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && tg.kind != chat.KindText) {
		return tg, role, notFound
	}
	return tg, role, err
}

// checkReplyTo says whether m's reply_to may be stored: any message the
// sender may see, of any kind (PROTOCOL.md v1.1: reply_to is the "seq of a
// message of the same conversation", refused only when it does not exist
// or lies outside the sender's visible range), unlike a mutation's target,
// which must be a text message.
func checkReplyTo(t *wtx, m *chat.Message) error {
	var visible bool
	err := t.QueryRow(`SELECT EXISTS (SELECT 1 FROM messages m JOIN members mb ON mb.conv_id = m.conv_id AND mb.user_id = $3
		WHERE m.conv_id = $1 AND m.seq = $2 AND m.seq >= mb.min_seq)`, m.Conv, m.ReplyTo, m.From).Scan(&visible)
	if err == nil && !visible {
		err = chat.Errorf(chat.ENotFound, "message %d not found", m.ReplyTo)
	}
	return err
}

// checkV11 decides whether m may be stored; a refusal is a *chat.Error,
// anything else fails the batch. It returns the target's state.
func (w *writer) checkV11(t *wtx, c *convTx, m *chat.Message) (target, error) {
	if !chat.IsMutation(m.Kind) {
		if m.ReplyTo == 0 {
			return target{}, nil
		}
		return target{}, checkReplyTo(t, m)
	}
	tg, role, err := loadTarget(t, m, m.Target)
	if err != nil {
		return tg, err
	}
	switch m.Kind {
	case chat.KindEdit:
		if tg.from != m.From {
			return tg, chat.Errorf(chat.EForbidden, "only its sender may edit a message")
		}
	case chat.KindDelete:
		if tg.from != m.From && (c.kind != chat.Group || (role != chat.RoleOwner && role != chat.RoleAdmin)) {
			return tg, chat.Errorf(chat.EForbidden, "only its sender, or a group's owner or admin, may delete a message")
		}
	}
	if tg.deleted {
		return tg, chat.Errorf(chat.EConflict, "message %d was deleted", m.Target)
	}
	if m.Kind == chat.KindReaction {
		if m.On == nil {
			return tg, chat.Errorf(chat.EBadRequest, "a reaction needs on")
		}
		var n int
		if err := t.QueryRow(`SELECT COUNT(*) FROM reactions WHERE conv_id = $1 AND target = $2 AND emoji = $3 AND user_id = $4`,
			m.Conv, m.Target, m.Emoji, m.From).Scan(&n); err != nil {
			return tg, err
		}
		if (n > 0) == *m.On {
			return tg, chat.Errorf(chat.EConflict, "the reaction would change nothing")
		}
	}
	return tg, nil
}

// applyV11 applies a stored message to the state it changes. The
// statements are queued: nothing reads their results, and the next
// statement that needs an answer (or COMMIT) sends them.
func (w *writer) applyV11(t *wtx, m *chat.Message, tg target) error {
	if m.Kind == chat.KindText {
		addMentions(t, m.Conv, m.Seq, m.Mentions, m.From)
		return nil
	}
	// Neither a mutation nor a system message is one unread counts.
	uncount(t, m.Conv, m.Seq)
	if m.Kind == chat.KindEdit || m.Kind == chat.KindDelete {
		if err := touchFormer(t, m.Conv, m.Target); err != nil {
			return err
		}
	}
	switch m.Kind {
	case chat.KindEdit:
		t.queue(`UPDATE messages SET body = $1, edited_at = $2, mentions = $3, search = NULLIF($4, '')::tsvector WHERE conv_id = $5 AND seq = $6`,
			m.Body, m.TS, nullString(strings.Join(m.Mentions, " ")), searchDoc(chat.KindText, m.Body), m.Conv, m.Target)
		dropMentions(t, m.Conv, m.Target, tg.mentions)
		addMentions(t, m.Conv, m.Target, m.Mentions, m.From)
	case chat.KindDelete:
		return w.applyDelete(t, m, tg)
	case chat.KindReaction:
		if *m.On {
			// An entry that is there keeps its place (run, migration 0007).
			t.queue(`INSERT INTO reactions (conv_id, target, emoji, user_id, seq, run) VALUES ($1, $2, $3, $4, $5::bigint,
				COALESCE((SELECT MIN(COALESCE(run, seq)) FROM reactions WHERE conv_id = $1 AND target = $2 AND emoji = $3), $5::bigint))`,
				m.Conv, m.Target, m.Emoji, m.From, m.Seq)
		} else {
			t.queue(`DELETE FROM reactions WHERE conv_id = $1 AND target = $2 AND emoji = $3 AND user_id = $4`, m.Conv, m.Target, m.Emoji, m.From)
		}
	}
	return nil
}

// applyDelete erases the target's content: its body, the bodies of its
// edits, its reactions (and the emoji of the reaction messages), its
// mentions, its attachments and its search vector. The rows are updated in place; PostgreSQL keeps the old tuple
// versions until VACUUM reclaims them (autovacuum, or DB.Vacuum), as
// docs/scaling.md says.
func (w *writer) applyDelete(t *wtx, m *chat.Message, tg target) error {
	t.queue(`UPDATE messages SET body = '', deleted = true, mentions = NULL, search = NULL WHERE conv_id = $1 AND seq = $2`, m.Conv, m.Target)
	t.queue(`UPDATE messages SET body = '', mentions = NULL WHERE conv_id = $1 AND target = $2 AND kind = 'edit' AND body <> ''`, m.Conv, m.Target)
	// The reactions' own messages name their emoji (up to 64 bytes of the
	// sender's choosing, ":name:" included): erased too.
	t.queue(`UPDATE messages SET emoji = NULL WHERE conv_id = $1 AND target = $2 AND kind = 'reaction' AND emoji IS NOT NULL`, m.Conv, m.Target)
	t.queue(`DELETE FROM reactions WHERE conv_id = $1 AND target = $2`, m.Conv, m.Target)
	dropMentions(t, m.Conv, m.Target, tg.mentions)
	uncount(t, m.Conv, m.Target)
	// Its sender counted it among its own texts past its read marker;
	// uncounted now subtracts it for everyone. A text of this transaction
	// is counted at its end (finishMessages) and is past any marker.
	t.queue(`UPDATE members SET own_unread = own_unread - 1 WHERE conv_id = $1 AND user_id = $2
		AND $3::bigint > GREATEST(read_seq, min_seq - 1) AND (max_seq IS NULL OR $3::bigint <= max_seq)`, m.Conv, tg.from, m.Target)
	return eraseAttachments(t, m.Conv, m.Target)
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
	t.queue(`UPDATE members SET version = $1 WHERE conv_id = $2 AND max_seq IS NOT NULL AND max_seq >= $3 AND min_seq <= $3`, v, conv, seq)
	return nil
}

func uncount(t *wtx, conv string, seq int64) {
	t.queue(`INSERT INTO uncounted (conv_id, seq) VALUES ($1, $2) ON CONFLICT DO NOTHING`, conv, seq)
}

func addMentions(t *wtx, conv string, seq int64, users []string, sender string) {
	if len(users) == 0 {
		return
	}
	// The sender's own message is never unread: no row counts it.
	t.queue(`INSERT INTO mentions (user_id, conv_id, seq) SELECT DISTINCT u, $2::text, $3::bigint FROM unnest($1::text[]) AS u
		WHERE u <> $4 ON CONFLICT DO NOTHING`, users, conv, seq, sender)
}

// dropMentions removes seq's mention rows; stored is the message's
// mentions column (space-separated ids).
func dropMentions(t *wtx, conv string, seq int64, stored string) {
	if stored == "" {
		return
	}
	t.queue(`DELETE FROM mentions WHERE user_id = ANY($1) AND conv_id = $2 AND seq = $3`, strings.Fields(stored), conv, seq)
}

// foldReactions fills in the current reactions of the text messages of
// msgs (ascending seqs of conv), with one range query.
func foldReactions(rows pgx.Rows, msgs []chat.Message) error {
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

// reactionsQuery reads the reactions of a range of conv's seqs ($1 conv,
// $2 and $3 the range), in the order foldReactions needs.
const reactionsQuery = `SELECT target, emoji, user_id FROM reactions WHERE conv_id = $1 AND target BETWEEN $2 AND $3 ORDER BY target, COALESCE(run, seq), seq`

// addReaction adds user to emoji's reaction, rows coming in the order of
// their reaction messages: emoji thus stay in order of first use.
func addReaction(rs []chat.Reaction, emoji, user string) []chat.Reaction {
	for k := range rs {
		if rs[k].Emoji == emoji {
			rs[k].Users = append(rs[k].Users, user)
			return rs
		}
	}
	return append(rs, chat.Reaction{Emoji: emoji, Users: []string{user}})
}
