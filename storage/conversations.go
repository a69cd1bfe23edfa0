package storage

import (
	"context"
	"database/sql"
	"errors"
	"sort"
	"strings"

	"github.com/imserver/imserver/chat"
)

// CreateDirect implements chat.ConversationStore.
func (db *DB) CreateDirect(ctx context.Context, id, a, b string) (string, bool, error) {
	pair := []string{a, b}
	sort.Strings(pair)
	key := pair[0] + "|" + pair[1]
	created := false
	err := db.w.exec(ctx, func(t *wtx) error {
		err := t.QueryRowContext(t.ctx, `SELECT id FROM conversations WHERE direct_key = ?`, key).Scan(&id)
		if err == nil {
			return nil
		} else if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		v, err := t.nextVersion()
		if err != nil {
			return err
		}
		if _, err := t.ExecContext(t.ctx, `INSERT INTO conversations (id, kind, direct_key, members_count, version, created_at) VALUES (?, ?, ?, 2, ?, ?)`,
			id, chat.Direct, key, v, nowMS()); err != nil {
			return err
		}
		for _, u := range pair {
			if err := insertMember(t, id, u, chat.RoleMember, 1, v); err != nil {
				return err
			}
		}
		created = true
		return nil
	})
	return id, created, err
}

func insertMember(t *wtx, conv, user, role string, minSeq, version int64) error {
	_, err := t.ExecContext(t.ctx, `INSERT INTO members (conv_id, user_id, role, min_seq, last_ack_seq, read_seq, version, joined_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, conv, user, role, minSeq, minSeq-1, minSeq-1, version, nowMS())
	return err
}

// CreateGroup implements chat.ConversationStore.
func (db *DB) CreateGroup(ctx context.Context, id, name, owner string, members []string) error {
	return db.w.exec(ctx, func(t *wtx) error {
		v, err := t.nextVersion()
		if err != nil {
			return err
		}
		if _, err := t.ExecContext(t.ctx, `INSERT INTO conversations (id, kind, name, members_count, version, created_at) VALUES (?, ?, ?, ?, ?, ?)`,
			id, chat.Group, name, 1+len(members), v, nowMS()); err != nil {
			return err
		}
		if err := insertMember(t, id, owner, chat.RoleOwner, 1, v); err != nil {
			return err
		}
		for _, u := range members {
			if err := insertMember(t, id, u, chat.RoleMember, 1, v); err != nil {
				return err
			}
		}
		return nil
	})
}

// AddMembers implements chat.ConversationStore.
func (db *DB) AddMembers(ctx context.Context, conv string, users []string) ([]string, error) {
	var added []string
	err := db.w.exec(ctx, func(t *wtx) error {
		added = added[:0]
		var maxSeq int64
		if err := t.QueryRowContext(t.ctx, `SELECT max_seq FROM conversations WHERE id = ?`, conv).Scan(&maxSeq); err != nil {
			return err
		}
		for _, u := range users {
			v, err := t.nextVersion()
			if err != nil {
				return err
			}
			// A former member rejoins with a new range; a current one is
			// left alone.
			res, err := t.ExecContext(t.ctx, `INSERT INTO members (conv_id, user_id, role, min_seq, last_ack_seq, read_seq, version, joined_at)
				VALUES (?1, ?2, 'member', ?3, ?3 - 1, ?3 - 1, ?4, ?5)
				ON CONFLICT (conv_id, user_id) DO UPDATE SET role = 'member', min_seq = ?3, max_seq = NULL,
					last_ack_seq = ?3 - 1, read_seq = ?3 - 1, own_unread = 0, version = ?4, joined_at = ?5
				WHERE members.max_seq IS NOT NULL`, conv, u, maxSeq+1, v, nowMS())
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n > 0 {
				added = append(added, u)
				// own_unread was set, not added to: a send of u earlier
				// in this transaction lies before its new range.
				t.ownCounted(conv, u)
			}
		}
		return touchConversation(t, conv)
	})
	return added, err
}

// touchConversation recounts members and gives the conversation a new
// version, so every member's entry shows the change, and counts the change
// of members (roster_v, migration 0015).
func touchConversation(t *wtx, conv string) error {
	v, err := t.nextVersion()
	if err != nil {
		return err
	}
	_, err = t.ExecContext(t.ctx, `UPDATE conversations SET version = ?, roster_v = roster_v + 1,
		members_count = (SELECT COUNT(*) FROM members WHERE conv_id = ? AND max_seq IS NULL) WHERE id = ?`, v, conv, conv)
	return err
}

// RemoveMember implements chat.ConversationStore.
func (db *DB) RemoveMember(ctx context.Context, conv, user string) error {
	return db.w.exec(ctx, func(t *wtx) error { return removeMember(t, conv, user) })
}

// removeMember closes user's range at the conversation's max_seq. When the
// owner goes, the longest-standing member becomes owner, so a group is
// never left without one.
func removeMember(t *wtx, conv, user string) error {
	v, err := t.nextVersion()
	if err != nil {
		return err
	}
	var role string
	err = t.QueryRowContext(t.ctx, `UPDATE members SET max_seq = (SELECT max_seq FROM conversations WHERE id = ?1), version = ?2
		WHERE conv_id = ?1 AND user_id = ?3 AND max_seq IS NULL RETURNING role`, conv, v, user).Scan(&role)
	if errors.Is(err, sql.ErrNoRows) {
		return chat.Errorf(chat.ENotMember, "not a member of this conversation")
	} else if err != nil {
		return err
	}
	if role == chat.RoleOwner {
		if _, err := t.ExecContext(t.ctx, `UPDATE members SET role = 'owner', version = ?1 WHERE conv_id = ?2 AND user_id = (
			SELECT user_id FROM members WHERE conv_id = ?2 AND max_seq IS NULL
			ORDER BY role = 'admin' DESC, joined_at, user_id LIMIT 1)`, v, conv); err != nil {
			return err
		}
	}
	return touchConversation(t, conv)
}

// KickMember implements chat.ConversationStore.
func (db *DB) KickMember(ctx context.Context, conv, by, user string) error {
	return db.w.exec(ctx, func(t *wtx) error {
		mine, target, err := actingRoles(t, conv, by, user)
		if err != nil {
			return err
		}
		if err := chat.CheckRemove(mine, target); err != nil {
			return err
		}
		return removeMember(t, conv, user)
	})
}

// SetRole implements chat.ConversationStore.
func (db *DB) SetRole(ctx context.Context, conv, by, user, role string) error {
	return db.w.exec(ctx, func(t *wtx) error {
		mine, _, err := actingRoles(t, conv, by, user)
		if err != nil {
			return err
		}
		if err := chat.CheckSetRole(by, mine, user, role); err != nil {
			return err
		}
		// Both rows get a new version: each user's conversation entry
		// carries its own role.
		v, err := t.nextVersion()
		if err != nil {
			return err
		}
		if _, err := t.ExecContext(t.ctx, `UPDATE members SET role = ?, version = ? WHERE conv_id = ? AND user_id = ?`, role, v, conv, user); err != nil {
			return err
		}
		if role == chat.RoleOwner {
			_, err = t.ExecContext(t.ctx, `UPDATE members SET role = ?, version = ? WHERE conv_id = ? AND user_id = ?`, chat.RoleAdmin, v, conv, by)
		}
		return err
	})
}

// RenameGroup implements chat.ConversationStore.
func (db *DB) RenameGroup(ctx context.Context, conv, by, name string) error {
	return db.w.exec(ctx, func(t *wtx) error {
		mine, _, err := actingRoles(t, conv, by, by)
		if err != nil {
			return err
		}
		if err := chat.CheckRename(mine); err != nil {
			return err
		}
		if _, err := t.ExecContext(t.ctx, `UPDATE conversations SET name = ? WHERE id = ?`, name, conv); err != nil {
			return err
		}
		// Every entry shows the name: the members' follow the
		// conversation's version, former members' their own row's.
		v, err := t.nextVersion()
		if err != nil {
			return err
		}
		if _, err := t.ExecContext(t.ctx, `UPDATE members SET version = ? WHERE conv_id = ? AND max_seq IS NOT NULL`, v, conv); err != nil {
			return err
		}
		return touchConversation(t, conv)
	})
}

// actingRoles reads the current roles of by, who acts, and user, whom it
// acts on: ENotMember when by is not a member, ENotFound when user is not.
func actingRoles(t *wtx, conv, by, user string) (mine, target string, err error) {
	rows, err := t.QueryContext(t.ctx, `SELECT user_id, role FROM members WHERE conv_id = ? AND user_id IN (?, ?) AND max_seq IS NULL`, conv, by, user)
	if err != nil {
		return "", "", err
	}
	defer rows.Close()
	for rows.Next() {
		var id, role string
		if err := rows.Scan(&id, &role); err != nil {
			return "", "", err
		}
		if id == by {
			mine = role
		}
		if id == user {
			target = role
		}
	}
	if err := rows.Err(); err != nil {
		return "", "", err
	}
	if mine == "" {
		return "", "", chat.Errorf(chat.ENotMember, "not a member of this conversation")
	}
	if target == "" {
		return "", "", chat.Errorf(chat.ENotFound, "user is not a member")
	}
	return mine, target, nil
}

// ClearHistory implements chat.ConversationStore.
func (db *DB) ClearHistory(ctx context.Context, conv, user string) error {
	return db.w.exec(ctx, func(t *wtx) error {
		v, err := t.nextVersion()
		if err != nil {
			return err
		}
		res, err := t.ExecContext(t.ctx, `UPDATE members SET
			min_seq = COALESCE(max_seq, (SELECT max_seq FROM conversations WHERE id = ?1)) + 1,
			read_seq = MAX(read_seq, COALESCE(max_seq, (SELECT max_seq FROM conversations WHERE id = ?1))),
			last_ack_seq = MAX(last_ack_seq, COALESCE(max_seq, (SELECT max_seq FROM conversations WHERE id = ?1))),
			own_unread = 0, version = ?2
			WHERE conv_id = ?1 AND user_id = ?3`, conv, v, user)
		if err != nil {
			return err
		}
		t.ownCounted(conv, user)
		if n, _ := res.RowsAffected(); n == 0 {
			return chat.Errorf(chat.ENotMember, "not a member of this conversation")
		}
		return nil
	})
}

// visibleMax is the largest seq a member row may see.
const visibleMax = `COALESCE(max_seq, (SELECT max_seq FROM conversations WHERE id = ?1))`

// SetRead implements chat.ConversationStore.
func (db *DB) SetRead(ctx context.Context, conv, user string, seq int64) (int64, bool, error) {
	var read int64
	var moved bool
	err := db.w.execKeepingMembers(ctx, func(t *wtx) error {
		moved = false
		v, err := t.nextVersion()
		if err != nil {
			return err
		}
		// The member's own texts past the new marker are counted from the
		// rows, those of this transaction included.
		err = t.QueryRowContext(t.ctx, `UPDATE members SET read_seq = MIN(?3, `+visibleMax+`), version = ?4,
			own_unread = (SELECT COUNT(*) FROM messages WHERE conv = (SELECT key FROM ids WHERE id = ?1)
				AND seq > MAX(MIN(?3, `+visibleMax+`), min_seq - 1) AND seq <= `+visibleMax+`
				AND sender = (SELECT key FROM ids WHERE id = ?2) AND kind = 'text' AND deleted IS NULL)
			WHERE conv_id = ?1 AND user_id = ?2 AND read_seq < MIN(?3, `+visibleMax+`) RETURNING read_seq`, conv, user, seq, v).Scan(&read)
		if err == nil {
			moved = true
			t.ownCounted(conv, user)
			return nil
		} else if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		err = t.QueryRowContext(t.ctx, `SELECT read_seq FROM members WHERE conv_id = ? AND user_id = ?`, conv, user).Scan(&read)
		if errors.Is(err, sql.ErrNoRows) {
			return chat.Errorf(chat.ENotMember, "not a member of this conversation")
		}
		return err
	})
	return read, moved, err
}

// SaveAcks implements chat.ConversationStore.
func (db *DB) SaveAcks(ctx context.Context, acks []chat.Ack) error {
	return db.w.execKeepingMembers(ctx, func(t *wtx) error {
		st, err := t.stmt(`UPDATE members SET last_ack_seq = MIN(?3, ` + visibleMax + `)
			WHERE conv_id = ?1 AND user_id = ?2 AND last_ack_seq < MIN(?3, ` + visibleMax + `)`)
		if err != nil {
			return err
		}
		for _, a := range acks {
			if _, err := st.ExecContext(t.ctx, a.Conv, a.User, a.Seq); err != nil {
				return err
			}
		}
		return nil
	})
}

// Membership implements chat.ConversationStore.
func (db *DB) Membership(ctx context.Context, conv, user string) (chat.Membership, error) {
	ms := chat.Membership{Conv: conv, User: user}
	var role sql.NullString
	var minSeq, maxSeq sql.NullInt64
	err := db.readers.QueryRowContext(ctx, `SELECT c.kind, m.role, m.min_seq, m.max_seq
		FROM conversations c LEFT JOIN members m ON m.conv_id = c.id AND m.user_id = ? WHERE c.id = ?`, user, conv).
		Scan(&ms.Kind, &role, &minSeq, &maxSeq)
	if errors.Is(err, sql.ErrNoRows) {
		return ms, chat.Errorf(chat.ENotFound, "conversation not found")
	} else if err != nil {
		return ms, err
	}
	if !role.Valid {
		return ms, chat.Errorf(chat.ENotMember, "not a member of this conversation")
	}
	ms.Role, ms.MinSeq, ms.MaxSeq, ms.Left = role.String, minSeq.Int64, maxSeq.Int64, maxSeq.Valid
	return ms, nil
}

// Roster implements chat.ConversationStore.
func (db *DB) Roster(ctx context.Context, conv string) (chat.Roster, error) {
	r := chat.Roster{Conv: conv, Members: []chat.Member{}}
	// The version is read before the members: a list newer than its
	// version is only read again, never kept past a change.
	err := db.readers.QueryRowContext(ctx, `SELECT kind, roster_v FROM conversations WHERE id = ?`, conv).Scan(&r.Kind, &r.Version)
	if errors.Is(err, sql.ErrNoRows) {
		return r, chat.Errorf(chat.ENotFound, "conversation not found")
	} else if err != nil {
		return r, err
	}
	rows, err := db.readers.QueryContext(ctx, `SELECT m.user_id, COALESCE(u.username, ''), COALESCE(u.display_name, ''), m.role, m.last_ack_seq, m.read_seq, m.min_seq
		FROM members m LEFT JOIN users u ON u.id = m.user_id
		WHERE m.conv_id = ? AND m.max_seq IS NULL ORDER BY m.joined_at, m.user_id`, conv)
	if err != nil {
		return r, err
	}
	defer rows.Close()
	for rows.Next() {
		var m chat.Member
		if err := rows.Scan(&m.UserID, &m.Username, &m.DisplayName, &m.Role, &m.LastAckSeq, &m.ReadSeq, &m.MinSeq); err != nil {
			return r, err
		}
		r.Members = append(r.Members, m)
	}
	return r, rows.Err()
}

// entrySelect reads users' conversation entries. The entry's version is the
// member row's, or the conversation's while the user is a member; ?1 is the
// user. Unread counts the seqs past the read marker but the uncounted ones
// (deleted messages, few), the user's own texts (own_unread, migration
// 0017) and the mutations, the difference of two counts (muts.go), looked
// up only where something is unread; last_message is
// the newest text
// message still there; mentions counts the unread ones that mention the
// user.
const entrySelect = `SELECT c.id, c.kind, c.name, c.members_count, m.role, m.min_seq, m.max_seq,
	COALESCE(m.max_seq, c.max_seq) AS hi, m.last_ack_seq, m.read_seq,
	MAX(m.version, CASE WHEN m.max_seq IS NULL THEN c.version ELSE 0 END) AS v,
	pu.id, pu.username, pu.display_name,
	lm.seq, lu.id, lm.client_msg_id, lm.kind, lm.body, lm.ts, lm.reply_to, lm.mentions, lm.edited_at,
	(SELECT COUNT(*) FROM uncounted un WHERE un.conv_id = c.id
		AND un.seq > MAX(m.read_seq, m.min_seq - 1) AND un.seq <= COALESCE(m.max_seq, c.max_seq))
	+ m.own_unread
	+ CASE WHEN COALESCE(m.max_seq, c.max_seq) <= MAX(m.read_seq, m.min_seq - 1) OR c.muts = 0 THEN 0 ELSE
		CASE WHEN m.max_seq IS NULL THEN c.muts ELSE COALESCE((SELECT h.muts FROM messages h WHERE h.conv = ck.key
			AND h.seq <= m.max_seq ORDER BY h.seq DESC LIMIT 1), c.muts_cut) END
		- COALESCE((SELECT l.muts FROM messages l WHERE l.conv = ck.key
			AND l.seq <= MAX(m.read_seq, m.min_seq - 1) ORDER BY l.seq DESC LIMIT 1), c.muts_cut) END,
	(SELECT COUNT(*) FROM mentions mn WHERE mn.user_id = m.user_id AND mn.conv_id = c.id
		AND mn.seq > MAX(m.read_seq, m.min_seq - 1) AND mn.seq <= COALESCE(m.max_seq, c.max_seq)),
	m.muted_until
FROM members m
JOIN conversations c ON c.id = m.conv_id
LEFT JOIN members pm ON c.kind = 'direct' AND pm.conv_id = c.id AND pm.user_id <> m.user_id
LEFT JOIN users pu ON pu.id = pm.user_id
LEFT JOIN ids ck ON ck.id = c.id
LEFT JOIN messages lm ON lm.conv = ck.key AND lm.seq = (SELECT l.seq FROM messages l WHERE l.conv = ck.key
	AND l.seq <= COALESCE(m.max_seq, c.max_seq) AND l.seq >= m.min_seq AND l.kind = 'text' AND l.deleted IS NULL
	ORDER BY l.seq DESC LIMIT 1)
LEFT JOIN ids lu ON lu.key = lm.sender
WHERE m.user_id = ?1`

type scanner interface{ Scan(...any) error }

func scanEntry(s scanner) (chat.Conversation, error) {
	var c chat.Conversation
	var maxSeq sql.NullInt64
	var pid, pname, pdisplay sql.NullString
	var lseq, lts, lreply, ledited sql.NullInt64
	var lfrom, lcmid, lkind, lbody, lmentions sql.NullString
	var uncounted int64
	err := s.Scan(&c.ID, &c.Kind, &c.Name, &c.MembersCount, &c.Role, &c.MinSeq, &maxSeq, &c.MaxSeq, &c.LastAckSeq, &c.ReadSeq, &c.Version,
		&pid, &pname, &pdisplay, &lseq, &lfrom, &lcmid, &lkind, &lbody, &lts, &lreply, &lmentions, &ledited, &uncounted, &c.Mentions,
		&c.MutedUntil)
	if err != nil {
		return c, err
	}
	if c.MutedUntil <= nowMS() {
		c.MutedUntil = 0 // a mute that ended is no mute
	}
	c.Left = maxSeq.Valid
	if pid.Valid {
		c.Peer = &chat.User{ID: pid.String, Username: pname.String, DisplayName: pdisplay.String}
		c.Name = pdisplay.String
	}
	if lseq.Valid {
		c.LastMessage = &chat.Message{Conv: c.ID, Seq: lseq.Int64, From: lfrom.String, ClientMsgID: lcmid.String,
			Kind: lkind.String, Body: lbody.String, TS: lts.Int64, ReplyTo: lreply.Int64, EditedAt: ledited.Int64}
		if lmentions.String != "" {
			c.LastMessage.Mentions = strings.Fields(lmentions.String)
		}
	}
	c.Unread = max(0, c.MaxSeq-max(c.ReadSeq, c.MinSeq-1)-uncounted)
	return c, nil
}

// Conversation implements chat.ConversationStore.
func (db *DB) Conversation(ctx context.Context, conv, user string) (chat.Conversation, error) {
	c, err := scanEntry(db.readers.QueryRowContext(ctx, entrySelect+` AND c.id = ?2`, user, conv))
	if errors.Is(err, sql.ErrNoRows) {
		return c, db.missingMember(ctx, db.readers, conv)
	}
	return c, err
}

// ConversationsSince implements chat.ConversationStore.
func (db *DB) ConversationsSince(ctx context.Context, user string, since int64, limit int) (chat.Changes, error) {
	ch := chat.Changes{Conversations: []chat.Conversation{}}
	tx, err := db.readers.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return ch, err
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, entrySelect+` AND v > ?2 ORDER BY v LIMIT ?3`, user, since, limit+1)
	if err != nil {
		return ch, err
	}
	defer rows.Close()
	for rows.Next() {
		c, err := scanEntry(rows)
		if err != nil {
			return ch, err
		}
		ch.Conversations = append(ch.Conversations, c)
	}
	if err := rows.Err(); err != nil {
		return ch, err
	}
	ch.Completed = len(ch.Conversations) <= limit
	if !ch.Completed {
		ch.Conversations = ch.Conversations[:limit]
	}
	ch.MaxVersion, err = maxVersion(ctx, tx, user)
	return ch, err
}

// MaxVersion implements chat.ConversationStore.
func (db *DB) MaxVersion(ctx context.Context, user string) (int64, error) {
	return maxVersion(ctx, db.readers, user)
}

func maxVersion(ctx context.Context, q queryRower, user string) (int64, error) {
	var v int64
	err := q.QueryRowContext(ctx, `SELECT COALESCE(MAX(MAX(m.version, CASE WHEN m.max_seq IS NULL THEN c.version ELSE 0 END)), 0)
		FROM members m JOIN conversations c ON c.id = m.conv_id WHERE m.user_id = ?`, user).Scan(&v)
	return v, err
}

// Contacts implements chat.ConversationStore.
func (db *DB) Contacts(ctx context.Context, user, except string) ([]string, error) {
	return db.contacts(ctx, `SELECT DISTINCT o.user_id FROM members m
		JOIN members o ON o.conv_id = m.conv_id AND o.max_seq IS NULL AND o.user_id <> m.user_id
		WHERE m.user_id = ? AND m.max_seq IS NULL AND m.conv_id <> ?`, user, except)
}

// ContactsEver implements chat.ConversationStore.
func (db *DB) ContactsEver(ctx context.Context, user string) ([]string, error) {
	return db.contacts(ctx, `SELECT DISTINCT o.user_id FROM members m
		JOIN members o ON o.conv_id = m.conv_id AND o.max_seq IS NULL AND o.user_id <> m.user_id
		WHERE m.user_id = ?`, user)
}

func (db *DB) contacts(ctx context.Context, q string, args ...any) ([]string, error) {
	rows, err := db.readers.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	ids := []string{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}
