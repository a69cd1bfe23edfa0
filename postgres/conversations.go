package postgres

import (
	"context"
	"errors"
	"sort"
	"strings"

	"github.com/imserver/imserver/chat"
	"github.com/jackc/pgx/v5"
)

// CreateDirect implements chat.ConversationStore.
func (db *DB) CreateDirect(ctx context.Context, id, a, b string) (string, bool, error) {
	pair := []string{a, b}
	sort.Strings(pair)
	key := pair[0] + "|" + pair[1]
	created := false
	err := db.w.exec(ctx, func(t *wtx) error {
		created = false
		err := t.QueryRow(`SELECT id FROM conversations WHERE direct_key = $1`, key).Scan(&id)
		if err == nil {
			return nil
		} else if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		v, _ := t.nextVersion()
		if _, err := t.Exec(`INSERT INTO conversations (id, kind, direct_key, members_count, version, created_at) VALUES ($1, $2, $3, 2, $4, $5)`,
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
	return id, created, wrap(err)
}

func insertMember(t *wtx, conv, user, role string, minSeq, version int64) error {
	_, err := t.Exec(`INSERT INTO members (conv_id, user_id, role, min_seq, last_ack_seq, read_seq, version, joined_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, conv, user, role, minSeq, minSeq-1, minSeq-1, version, nowMS())
	return err
}

// CreateGroup implements chat.ConversationStore.
func (db *DB) CreateGroup(ctx context.Context, id, name, owner string, members []string) error {
	return wrap(db.w.exec(ctx, func(t *wtx) error {
		v, _ := t.nextVersion()
		if _, err := t.Exec(`INSERT INTO conversations (id, kind, name, members_count, version, created_at) VALUES ($1, $2, $3, $4, $5, $6)`,
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
	}))
}

// AddMembers implements chat.ConversationStore.
func (db *DB) AddMembers(ctx context.Context, conv string, users []string) ([]string, error) {
	var added []string
	err := db.w.exec(ctx, func(t *wtx) error {
		added = added[:0]
		var maxSeq int64
		// Locked before max_seq is read, as in removeMember.
		if err := t.QueryRow(`SELECT max_seq FROM conversations WHERE id = $1 FOR UPDATE`, conv).Scan(&maxSeq); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return chat.Errorf(chat.ENotFound, "conversation not found")
			}
			return err
		}
		for _, u := range users {
			v, _ := t.nextVersion()
			// A former member rejoins with a new range; a current one is
			// left alone.
			tag, err := t.Exec(`INSERT INTO members (conv_id, user_id, role, min_seq, last_ack_seq, read_seq, version, joined_at)
				VALUES ($1, $2, 'member', $3::bigint, $3::bigint - 1, $3::bigint - 1, $4, $5)
				ON CONFLICT (conv_id, user_id) DO UPDATE SET role = 'member', min_seq = $3::bigint, max_seq = NULL,
					last_ack_seq = $3::bigint - 1, read_seq = $3::bigint - 1, own_unread = 0, version = $4, joined_at = $5
				WHERE members.max_seq IS NOT NULL`, conv, u, maxSeq+1, v, nowMS())
			if err != nil {
				return err
			}
			if tag.RowsAffected() > 0 {
				added = append(added, u)
				t.ownCounted(conv, u) // own_unread was set (no batch mixes sends in, today)
			}
		}
		return touchConversation(t, conv)
	})
	return added, wrap(err)
}

// touchConversation recounts members and gives the conversation a new
// version, so every member's entry shows the change.
func touchConversation(t *wtx, conv string) error {
	v, _ := t.nextVersion()
	_, err := t.Exec(`UPDATE conversations SET version = $1, roster_v = roster_v + 1,
		members_count = (SELECT COUNT(*) FROM members WHERE conv_id = $2 AND max_seq IS NULL) WHERE id = $2`, v, conv)
	return err
}

// RemoveMember implements chat.ConversationStore.
func (db *DB) RemoveMember(ctx context.Context, conv, user string) error {
	return wrap(db.w.exec(ctx, func(t *wtx) error { return removeMember(t, conv, user) }))
}

// KickMember implements chat.ConversationStore.
func (db *DB) KickMember(ctx context.Context, conv, by, user string) error {
	return wrap(db.w.exec(ctx, func(t *wtx) error {
		mine, target, err := actingRoles(t, conv, by, user)
		if err != nil {
			return err
		}
		if err := chat.CheckRemove(mine, target); err != nil {
			return err
		}
		return removeMember(t, conv, user)
	}))
}

// SetRole implements chat.ConversationStore.
func (db *DB) SetRole(ctx context.Context, conv, by, user, role string) error {
	return wrap(db.w.exec(ctx, func(t *wtx) error {
		mine, _, err := actingRoles(t, conv, by, user)
		if err != nil {
			return err
		}
		if err := chat.CheckSetRole(by, mine, user, role); err != nil {
			return err
		}
		// Both rows get a new version: each user's conversation entry
		// carries its own role.
		v, _ := t.nextVersion()
		if _, err := t.Exec(`UPDATE members SET role = $1, version = $2 WHERE conv_id = $3 AND user_id = $4`, role, v, conv, user); err != nil {
			return err
		}
		if role == chat.RoleOwner {
			_, err = t.Exec(`UPDATE members SET role = $1, version = $2 WHERE conv_id = $3 AND user_id = $4`, chat.RoleAdmin, v, conv, by)
		}
		return err
	}))
}

// RenameGroup implements chat.ConversationStore.
func (db *DB) RenameGroup(ctx context.Context, conv, by, name string) error {
	return wrap(db.w.exec(ctx, func(t *wtx) error {
		mine, _, err := actingRoles(t, conv, by, by)
		if err != nil {
			return err
		}
		if err := chat.CheckRename(mine); err != nil {
			return err
		}
		if _, err := t.Exec(`UPDATE conversations SET name = $1 WHERE id = $2`, name, conv); err != nil {
			return err
		}
		// Every entry shows the name: the members' follow the
		// conversation's version, former members' their own row's.
		v, _ := t.nextVersion()
		if _, err := t.Exec(`UPDATE members SET version = $1 WHERE conv_id = $2 AND max_seq IS NOT NULL`, v, conv); err != nil {
			return err
		}
		return touchConversation(t, conv)
	}))
}

// actingRoles reads the current roles of by, who acts, and user, whom it
// acts on, after locking the conversation's row: every change of
// membership and roles takes that lock first (removeMember too), so a
// role read here stands until the transaction ends. ENotMember when by is
// not a member, ENotFound when user is not.
func actingRoles(t *wtx, conv, by, user string) (mine, target string, err error) {
	if _, err := t.Exec(`SELECT 1 FROM conversations WHERE id = $1 FOR UPDATE`, conv); err != nil {
		return "", "", err
	}
	rows, err := t.Query(`SELECT user_id, role FROM members WHERE conv_id = $1 AND user_id IN ($2, $3) AND max_seq IS NULL`, conv, by, user)
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

// removeMember closes user's range at the conversation's max_seq. When the
// owner goes, the longest-standing member becomes owner.
func removeMember(t *wtx, conv, user string) error {
	v, _ := t.nextVersion()
	// The conversation's row first, before max_seq is read: a batch of
	// messages holding it (past its membership check) either commits
	// before, or gives way and is rerun after, checking again (writer.go).
	if _, err := t.Exec(`SELECT 1 FROM conversations WHERE id = $1 FOR UPDATE`, conv); err != nil {
		return err
	}
	var role string
	err := t.QueryRow(`UPDATE members SET max_seq = (SELECT max_seq FROM conversations WHERE id = $1), version = $2
		WHERE conv_id = $1 AND user_id = $3 AND max_seq IS NULL RETURNING role`, conv, v, user).Scan(&role)
	if errors.Is(err, pgx.ErrNoRows) {
		return chat.Errorf(chat.ENotMember, "not a member of this conversation")
	} else if err != nil {
		return err
	}
	if role == chat.RoleOwner {
		if _, err := t.Exec(`UPDATE members SET role = 'owner', version = $1 WHERE conv_id = $2 AND user_id = (
			SELECT user_id FROM members WHERE conv_id = $2 AND max_seq IS NULL
			ORDER BY role = 'admin' DESC, joined_at, user_id LIMIT 1)`, v, conv); err != nil {
			return err
		}
	}
	return touchConversation(t, conv)
}

// visibleMax is the largest seq a member row may see; $1 is the
// conversation.
const visibleMax = `COALESCE(max_seq, (SELECT max_seq FROM conversations WHERE id = $1))`

// ClearHistory implements chat.ConversationStore.
func (db *DB) ClearHistory(ctx context.Context, conv, user string) error {
	return wrap(db.w.exec(ctx, func(t *wtx) error {
		v, _ := t.nextVersion()
		tag, err := t.Exec(`UPDATE members SET
			min_seq = `+visibleMax+` + 1,
			read_seq = GREATEST(read_seq, `+visibleMax+`),
			last_ack_seq = GREATEST(last_ack_seq, `+visibleMax+`),
			own_unread = 0, version = $2
			WHERE conv_id = $1 AND user_id = $3`, conv, v, user)
		if err != nil {
			return err
		}
		t.ownCounted(conv, user)
		if tag.RowsAffected() == 0 {
			return chat.Errorf(chat.ENotMember, "not a member of this conversation")
		}
		return nil
	}))
}

// SetRead implements chat.ConversationStore.
func (db *DB) SetRead(ctx context.Context, conv, user string, seq int64) (int64, bool, error) {
	var read int64
	var moved bool
	err := db.w.exec(ctx, func(t *wtx) error {
		moved = false
		v, _ := t.nextVersion()
		// The member's own texts past the new marker are counted from the
		// rows, those of this transaction included.
		err := t.QueryRow(`UPDATE members SET read_seq = LEAST($3::bigint, `+visibleMax+`), version = $4,
			own_unread = (SELECT COUNT(*) FROM messages WHERE conv_id = $1
				AND seq > GREATEST(LEAST($3::bigint, `+visibleMax+`), min_seq - 1) AND seq <= `+visibleMax+`
				AND sender_id = $2 AND kind = 'text' AND deleted IS NOT TRUE)
			WHERE conv_id = $1 AND user_id = $2 AND read_seq < LEAST($3::bigint, `+visibleMax+`) RETURNING read_seq`, conv, user, seq, v).Scan(&read)
		if err == nil {
			moved = true
			t.ownCounted(conv, user)
			return nil
		} else if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		err = t.QueryRow(`SELECT read_seq FROM members WHERE conv_id = $1 AND user_id = $2`, conv, user).Scan(&read)
		if errors.Is(err, pgx.ErrNoRows) {
			return chat.Errorf(chat.ENotMember, "not a member of this conversation")
		}
		return err
	})
	return read, moved, wrap(err)
}

// SaveAcks implements chat.ConversationStore: one statement for all.
func (db *DB) SaveAcks(ctx context.Context, acks []chat.Ack) error {
	if len(acks) == 0 {
		return nil
	}
	convs, users, seqs := make([]string, len(acks)), make([]string, len(acks)), make([]int64, len(acks))
	for i, a := range acks {
		convs[i], users[i], seqs[i] = a.Conv, a.User, a.Seq
	}
	return wrap(db.w.exec(ctx, func(t *wtx) error {
		_, err := t.Exec(`UPDATE members m SET last_ack_seq = LEAST(a.s, COALESCE(m.max_seq, c.max_seq))
			FROM (SELECT c, u, MAX(s) AS s FROM unnest($1::text[], $2::text[], $3::bigint[]) AS x(c, u, s) GROUP BY c, u) AS a,
				conversations c
			WHERE m.conv_id = a.c AND m.user_id = a.u AND c.id = a.c
				AND m.last_ack_seq < LEAST(a.s, COALESCE(m.max_seq, c.max_seq))`, convs, users, seqs)
		return err
	}))
}

// Membership implements chat.ConversationStore.
func (db *DB) Membership(ctx context.Context, conv, user string) (chat.Membership, error) {
	ms := chat.Membership{Conv: conv, User: user}
	var role *string
	var minSeq, maxSeq *int64
	err := db.pool.QueryRow(ctx, `SELECT c.kind, m.role, m.min_seq, m.max_seq
		FROM conversations c LEFT JOIN members m ON m.conv_id = c.id AND m.user_id = $1 WHERE c.id = $2`, user, conv).
		Scan(&ms.Kind, &role, &minSeq, &maxSeq)
	if errors.Is(err, pgx.ErrNoRows) {
		return ms, chat.Errorf(chat.ENotFound, "conversation not found")
	} else if err != nil {
		return ms, wrap(err)
	}
	if role == nil {
		return ms, chat.Errorf(chat.ENotMember, "not a member of this conversation")
	}
	ms.Role, ms.MinSeq = *role, *minSeq
	if maxSeq != nil {
		ms.MaxSeq, ms.Left = *maxSeq, true
	}
	return ms, nil
}

// Roster implements chat.ConversationStore.
func (db *DB) Roster(ctx context.Context, conv string) (chat.Roster, error) {
	r := chat.Roster{Conv: conv, Members: []chat.Member{}}
	// The version is read before the members: a list newer than its
	// version is only read again, never kept past a change.
	err := db.pool.QueryRow(ctx, `SELECT kind, roster_v FROM conversations WHERE id = $1`, conv).Scan(&r.Kind, &r.Version)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, chat.Errorf(chat.ENotFound, "conversation not found")
	} else if err != nil {
		return r, wrap(err)
	}
	rows, err := db.pool.Query(ctx, `SELECT m.user_id, COALESCE(u.username, ''), COALESCE(u.display_name, ''), m.role, m.last_ack_seq, m.read_seq, m.min_seq
		FROM members m LEFT JOIN users u ON u.id = m.user_id
		WHERE m.conv_id = $1 AND m.max_seq IS NULL ORDER BY m.joined_at, m.user_id`, conv)
	if err != nil {
		return r, wrap(err)
	}
	defer rows.Close()
	for rows.Next() {
		var m chat.Member
		if err := rows.Scan(&m.UserID, &m.Username, &m.DisplayName, &m.Role, &m.LastAckSeq, &m.ReadSeq, &m.MinSeq); err != nil {
			return r, wrap(err)
		}
		r.Members = append(r.Members, m)
	}
	return r, wrap(rows.Err())
}

// entrySelect reads a user's conversation entries. The entry's version is
// the member row's, or the conversation's while the user is a member; $1 is
// the user. It is a subquery so that callers can filter on v. Unread
// counts the seqs past the read marker but the uncounted ones (mutations,
// deleted messages: few) and the user's own texts (own_unread); last_message is the newest text message still
// there; mentioned counts the unread ones that mention the user.
const entrySelect = `SELECT * FROM (SELECT c.id AS cid, c.kind AS ckind, c.name AS cname, c.members_count, m.role, m.min_seq, m.max_seq AS left_seq,
	COALESCE(m.max_seq, c.max_seq) AS hi, m.last_ack_seq, m.read_seq,
	GREATEST(m.version, CASE WHEN m.max_seq IS NULL THEN c.version ELSE 0 END) AS v,
	pu.id AS pid, pu.username AS pname, pu.display_name AS pdisplay,
	lm.seq AS lseq, lm.sender_id AS lfrom, lm.client_msg_id AS lcmid, lm.kind AS lkind, lm.body AS lbody, lm.ts AS lts,
	lm.reply_to AS lreply, lm.mentions AS lmentions, lm.edited_at AS ledited,
	(SELECT COUNT(*) FROM uncounted un WHERE un.conv_id = c.id
		AND un.seq > GREATEST(m.read_seq, m.min_seq - 1) AND un.seq <= COALESCE(m.max_seq, c.max_seq)) + m.own_unread AS uncounted,
	(SELECT COUNT(*) FROM mentions mn WHERE mn.user_id = m.user_id AND mn.conv_id = c.id
		AND mn.seq > GREATEST(m.read_seq, m.min_seq - 1) AND mn.seq <= COALESCE(m.max_seq, c.max_seq)) AS mentioned,
	m.muted_until
FROM members m
JOIN conversations c ON c.id = m.conv_id
LEFT JOIN members pm ON c.kind = 'direct' AND pm.conv_id = c.id AND pm.user_id <> m.user_id
LEFT JOIN users pu ON pu.id = pm.user_id
LEFT JOIN messages lm ON lm.conv_id = c.id AND lm.seq = (SELECT l.seq FROM messages l WHERE l.conv_id = c.id
	AND l.seq <= COALESCE(m.max_seq, c.max_seq) AND l.seq >= m.min_seq AND l.kind = 'text' AND l.deleted IS NULL
	ORDER BY l.seq DESC LIMIT 1)
WHERE m.user_id = $1) e`

func scanEntry(s pgx.Row) (chat.Conversation, error) {
	var c chat.Conversation
	var maxSeq *int64
	var pid, pname, pdisplay *string
	var lseq, lts *int64
	var lfrom, lcmid, lkind, lbody, lmentions *string
	var lreply, ledited *int64
	var uncounted int64
	err := s.Scan(&c.ID, &c.Kind, &c.Name, &c.MembersCount, &c.Role, &c.MinSeq, &maxSeq, &c.MaxSeq, &c.LastAckSeq, &c.ReadSeq, &c.Version,
		&pid, &pname, &pdisplay, &lseq, &lfrom, &lcmid, &lkind, &lbody, &lts, &lreply, &lmentions, &ledited, &uncounted, &c.Mentions, &c.MutedUntil)
	if err != nil {
		return c, err
	}
	if c.MutedUntil <= nowMS() {
		c.MutedUntil = 0 // a mute that ended is no mute
	}
	c.Left = maxSeq != nil
	if pid != nil {
		c.Peer = &chat.User{ID: *pid, Username: *pname, DisplayName: *pdisplay}
		c.Name = *pdisplay
	}
	if lseq != nil {
		c.LastMessage = &chat.Message{Conv: c.ID, Seq: *lseq, From: *lfrom, ClientMsgID: *lcmid, Kind: *lkind, Body: *lbody, TS: *lts,
			ReplyTo: deref(lreply), EditedAt: deref(ledited)}
		if lmentions != nil && *lmentions != "" {
			c.LastMessage.Mentions = strings.Fields(*lmentions)
		}
	}
	c.Unread = max(0, c.MaxSeq-max(c.ReadSeq, c.MinSeq-1)-uncounted)
	return c, nil
}

// Conversation implements chat.ConversationStore.
func (db *DB) Conversation(ctx context.Context, conv, user string) (chat.Conversation, error) {
	c, err := scanEntry(db.pool.QueryRow(ctx, entrySelect+` WHERE cid = $2`, user, conv))
	if errors.Is(err, pgx.ErrNoRows) {
		return c, db.missingMember(ctx, conv)
	}
	return c, wrap(err)
}

// ConversationsSince implements chat.ConversationStore. The entries and
// max_version are read in one snapshot (REPEATABLE READ), so max_version
// never runs ahead of an entry the page left out.
func (db *DB) ConversationsSince(ctx context.Context, user string, since int64, limit int) (chat.Changes, error) {
	ch := chat.Changes{Conversations: []chat.Conversation{}}
	tx, err := db.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return ch, wrap(err)
	}
	defer tx.Rollback(context.Background())
	rows, err := tx.Query(ctx, entrySelect+` WHERE v > $2 ORDER BY v LIMIT $3`, user, since, limit+1)
	if err != nil {
		return ch, wrap(err)
	}
	for rows.Next() {
		c, err := scanEntry(rows)
		if err != nil {
			rows.Close()
			return ch, wrap(err)
		}
		ch.Conversations = append(ch.Conversations, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return ch, wrap(err)
	}
	ch.Completed = len(ch.Conversations) <= limit
	if !ch.Completed {
		ch.Conversations = ch.Conversations[:limit]
	}
	ch.MaxVersion, err = maxVersion(ctx, tx, user)
	return ch, wrap(err)
}

// MaxVersion implements chat.ConversationStore.
func (db *DB) MaxVersion(ctx context.Context, user string) (int64, error) {
	v, err := maxVersion(ctx, db.pool, user)
	return v, wrap(err)
}

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func maxVersion(ctx context.Context, q querier, user string) (int64, error) {
	var v int64
	err := q.QueryRow(ctx, `SELECT COALESCE(MAX(GREATEST(m.version, CASE WHEN m.max_seq IS NULL THEN c.version ELSE 0 END)), 0)
		FROM members m JOIN conversations c ON c.id = m.conv_id WHERE m.user_id = $1`, user).Scan(&v)
	return v, err
}
