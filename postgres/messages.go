package postgres

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/imserver/imserver/chat"
	"github.com/jackc/pgx/v5"
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

// storable reports whether PostgreSQL's text type takes s: valid UTF-8
// without NUL bytes (SQLite takes both).
func storable(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}

type msgKey struct{ conv, from, cmid string }

// appendRun stores a run of messages queued one after another. A round trip
// costs more than a row here, so each step is one statement for the whole
// run: lock the conversations, check the senders, look up earlier sends of
// the same client_msg_ids, insert.
func (w *writer) appendRun(t *wtx, run []*job) error {
	// What PostgreSQL's text cannot hold is refused alone: in a statement
	// it would fail the whole batch.
	ok := run[:0:0]
	for _, j := range run {
		m := j.msg
		if storable(m.Conv) && storable(m.From) && storable(m.ClientMsgID) && storable(m.Body) && storable(m.Kind) {
			ok = append(ok, j)
		} else {
			j.r = result{err: chat.Errorf(chat.EBadRequest, "text with a NUL byte or invalid UTF-8 cannot be stored")}
		}
	}
	if run = ok; len(run) == 0 {
		return nil
	}
	// The reads of the run leave in one pipeline, after whatever is
	// queued (at the start of the batch: BEGIN and the lock).
	w.lockConvs(t, run)
	w.checkSenders(t, run)
	prev := w.earlier(t, run)
	if err := t.flush(); err != nil {
		return err
	}
	// Decide each message in queue order; a retry queued in the same run
	// is a duplicate of the first send.
	fresh := make(map[msgKey]int, len(run)) // key -> index in run
	count := make(map[*convTx]int64)
	for i, j := range run {
		m := j.msg
		c := t.convs[m.Conv]
		switch {
		case c == nil:
			j.r = result{err: chat.Errorf(chat.ENotFound, "conversation not found")}
		case !t.senders[[2]string{m.Conv, m.From}].member:
			// A retry of what the sender stored while a member gets the
			// first answer, even now ("retries get the first seq").
			if p, ok := prev[msgKey{m.Conv, m.From, m.ClientMsgID}]; ok {
				j.r = result{msg: p, dup: true}
			} else {
				j.r = result{err: chat.Errorf(chat.ENotMember, "not a member of this conversation")}
			}
		default:
			k := msgKey{m.Conv, m.From, m.ClientMsgID}
			if p, ok := prev[k]; ok {
				j.r = result{msg: p, dup: true}
			} else if _, ok := fresh[k]; ok {
				j.r = result{dup: true} // filled in below
			} else if m.RetryOnly != nil {
				j.r = result{err: m.RetryOnly}
			} else {
				fresh[k] = i
				count[c]++
				j.r = result{}
				continue
			}
		}
	}
	if len(fresh) == 0 {
		return nil
	}
	// Seqs, one reservation per conversation, in order of first use so
	// that the answer does not depend on map order.
	// With Redis, all of them in one round trip.
	first := make(map[*convTx]int64, len(count))
	failed := make(map[*convTx]error)
	var cs []*convTx
	var ns []int64
	listed := make(map[*convTx]bool, len(count))
	for _, j := range run {
		c := t.convs[j.msg.Conv]
		if c == nil || count[c] == 0 || listed[c] {
			continue
		}
		listed[c] = true
		cs, ns = append(cs, c), append(ns, count[c])
	}
	firsts, errs := w.seqs.reserveMany(t, cs, ns)
	for i, c := range cs {
		if err := errs[i]; err != nil {
			var ce *chat.Error
			if !errors.As(err, &ce) {
				return err
			}
			failed[c] = err
			continue
		}
		first[c] = firsts[i]
	}
	n := len(fresh)
	convs, seqs, froms, cmids, kinds, bodies, tss := make([]string, 0, n), make([]int64, 0, n), make([]string, 0, n),
		make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]int64, 0, n)
	docs := make([]string, 0, n) // search vectors (search.go)
	ts := w.opts.Clock()
	for i, j := range run {
		m := j.msg
		k := msgKey{m.Conv, m.From, m.ClientMsgID}
		if idx, ok := fresh[k]; !ok || idx != i {
			continue
		}
		c := t.convs[m.Conv]
		if err := failed[c]; err != nil {
			j.r = result{err: err}
			delete(fresh, k)
			continue
		}
		m.Seq = first[c]
		first[c]++
		m.TS = ts
		convs, seqs, froms, cmids, kinds, bodies, tss = append(convs, m.Conv), append(seqs, m.Seq), append(froms, m.From),
			append(cmids, m.ClientMsgID), append(kinds, m.Kind), append(bodies, m.Body), append(tss, m.TS)
		docs = append(docs, searchDoc(m.Kind, m.Body))
		if c.max == 0 {
			t.touched = append(t.touched, c)
		}
		c.max = m.Seq
		if m.Kind == chat.KindText {
			t.senders[[2]string{m.Conv, m.From}].own++
		}
		m.RosterV = c.rosterV
		t.committed = append(t.committed, m)
		m.Origin = ""
		j.r = result{msg: m}
	}
	for _, j := range run {
		if j.r.dup && j.r.msg.Seq == 0 && j.r.err == nil {
			m := j.msg
			i, ok := fresh[msgKey{m.Conv, m.From, m.ClientMsgID}]
			if !ok {
				// The first send failed (its seqs were unavailable): so does
				// the retry.
				j.r = result{err: failed[t.convs[m.Conv]]}
				continue
			}
			j.r = result{msg: run[i].r.msg, dup: true}
		}
	}
	if len(convs) == 0 {
		return nil
	}
	// No ON CONFLICT: the earlier sends were looked up under the write
	// lock, so a unique violation here is a bug and fails the batch rather
	// than storing anything twice. Queued: it leaves with COMMIT.
	t.queue(`INSERT INTO messages (conv_id, seq, sender_id, client_msg_id, kind, body, ts, search)
		SELECT c, s, f, i, k, b, ts, NULLIF(d, '')::tsvector
		FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::bigint[], $8::text[]) AS u(c, s, f, i, k, b, ts, d)`,
		convs, seqs, froms, cmids, kinds, bodies, tss, docs)
	return nil
}

// lockConvs queues the locking of the rows of the run's conversations not
// yet locked by this transaction, in id order.
func (w *writer) lockConvs(t *wtx, run []*job) {
	var ids []string
	for _, j := range run {
		if _, ok := t.convs[j.msg.Conv]; !ok && !slices.Contains(ids, j.msg.Conv) {
			ids = append(ids, j.msg.Conv)
		}
	}
	if len(ids) == 0 {
		return
	}
	slices.Sort(ids)
	t.queue(`SELECT id, kind, GREATEST(max_seq, seq_bound), roster_v FROM conversations WHERE id = ANY($1) ORDER BY id FOR UPDATE`, ids).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			c := &convTx{}
			var floor int64
			if err := rows.Scan(&c.id, &c.kind, &floor, &c.rosterV); err != nil {
				return err
			}
			c.next = floor + 1
			t.convs[c.id] = c
		}
		return rows.Err()
	})
}

// checkSenders queues the reading, inside the transaction, of whether
// each sender of the run is a current member: a kick committed meanwhile
// (here or on another node) is never overtaken by a send.
func (w *writer) checkSenders(t *wtx, run []*job) {
	var convs, users []string
	for _, j := range run {
		k := [2]string{j.msg.Conv, j.msg.From}
		s := t.senders[k]
		if s == nil {
			s = &senderTx{conv: k[0], user: k[1]}
			t.senders[k] = s
		}
		if !s.checked {
			s.checked, s.member = true, false
			convs, users = append(convs, k[0]), append(users, k[1])
		}
	}
	if len(convs) == 0 {
		return
	}
	t.queue(`SELECT m.conv_id, m.user_id FROM unnest($1::text[], $2::text[]) AS k(c, u)
		JOIN members m ON m.conv_id = k.c AND m.user_id = k.u
		WHERE m.max_seq IS NULL`, convs, users).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var k [2]string
			if err := rows.Scan(&k[0], &k[1]); err != nil {
				return err
			}
			t.senders[k].member = true
		}
		return rows.Err()
	})
}

// earlier queues the look-up of the messages already stored under the
// client_msg_ids of the run; the map is filled when the pipeline is read.
func (w *writer) earlier(t *wtx, run []*job) map[msgKey]chat.Message {
	n := len(run)
	convs, froms, cmids := make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
	for _, j := range run {
		convs, froms, cmids = append(convs, j.msg.Conv), append(froms, j.msg.From), append(cmids, j.msg.ClientMsgID)
	}
	prev := make(map[msgKey]chat.Message)
	// The retry gets the message as it stands (folded, as SQLite answers).
	t.queue(`SELECT m.conv_id, `+messageColumns+`
		FROM unnest($1::text[], $2::text[], $3::text[]) AS k(c, s, i)
		JOIN messages m ON m.conv_id = k.c AND m.sender_id = k.s AND m.client_msg_id = k.i`,
		convs, froms, cmids).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			m, err := scanMessageConv(rows)
			if err != nil {
				return err
			}
			prev[msgKey{m.Conv, m.From, m.ClientMsgID}] = m
		}
		return rows.Err()
	})
	return prev
}

// finishMessages moves each conversation's max_seq and version once per
// batch, and counts the senders' texts in their own_unread (unread counts
// the text messages of others: a send moves no read marker).
//
// With lockLast the versions are taken from the counter by a statement
// queued before the markers: from then on the batch holds the counter and
// waits only for locks that no transaction holding the counter can want
// (rows of members are written under the counter by function batches,
// which take it first), so such waits never close a cycle.
func (w *writer) finishMessages(t *wtx) error {
	if len(t.touched) == 0 {
		return nil
	}
	ids, maxes := make([]string, 0, len(t.touched)), make([]int64, 0, len(t.touched))
	for _, c := range t.touched {
		ids, maxes = append(ids, c.id), append(maxes, c.max)
	}
	if t.lockLast {
		// The wait for the counter is bounded (writer.go).
		t.queue("SET LOCAL lock_timeout = " + strconv.FormatInt(lockLastTimeout.Milliseconds(), 10))
		// The i-th conversation (1-based) gets the counter's old value + i:
		// the versions the explicit path below hands out.
		t.queue(`WITH v AS (UPDATE counters SET value = value + $3::bigint WHERE name = 'version' RETURNING value - $3::bigint AS base)
			UPDATE conversations c SET max_seq = u.m, version = v.base + u.i
			FROM v, unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS u(id, m, i) WHERE c.id = u.id`, ids, maxes, int64(len(ids)))
	} else {
		versions := make([]int64, 0, len(t.touched))
		for range t.touched {
			v, _ := t.nextVersion()
			versions = append(versions, v)
		}
		t.queue(`UPDATE conversations c SET max_seq = u.m, version = u.v
			FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS u(id, m, v) WHERE c.id = u.id`, ids, maxes, versions)
	}
	var convs, users []string
	var owns []int64
	for _, s := range t.senders {
		if s.own != 0 {
			convs, users, owns = append(convs, s.conv), append(users, s.user), append(owns, s.own)
			s.own = 0
		}
	}
	if len(convs) > 0 {
		t.queue(`UPDATE members m SET own_unread = m.own_unread + u.n
			FROM unnest($1::text[], $2::text[], $3::bigint[]) AS u(c, usr, n) WHERE m.conv_id = u.c AND m.user_id = u.usr`, convs, users, owns)
	}
	return nil
}

// beforeFunc readies the transaction for a function job, which reads
// conversations.max_seq to set visible ranges and may change who is a
// member.
func (w *writer) beforeFunc(t *wtx) {
	var ids []string
	var maxes []int64
	for _, c := range t.touched {
		if c.max != c.stored {
			ids, maxes = append(ids, c.id), append(maxes, c.max)
			c.stored = c.max
		}
	}
	if len(ids) > 0 {
		t.queue(`UPDATE conversations c SET max_seq = u.m
			FROM unnest($1::text[], $2::bigint[]) AS u(id, m) WHERE c.id = u.id`, ids, maxes)
	}
	for _, s := range t.senders {
		s.checked = false
	}
}

// Messages implements chat.MessageStore.
func (db *DB) Messages(ctx context.Context, conv, user string, q chat.PageQuery) (chat.Page, error) {
	var lo, hi int64
	err := db.pool.QueryRow(ctx, `SELECT m.min_seq, COALESCE(m.max_seq, c.max_seq)
		FROM conversations c JOIN members m ON m.conv_id = c.id AND m.user_id = $1 WHERE c.id = $2`, user, conv).Scan(&lo, &hi)
	if errors.Is(err, pgx.ErrNoRows) {
		return chat.Page{}, db.missingMember(ctx, conv)
	} else if err != nil {
		return chat.Page{}, wrap(err)
	}
	// Rows above hi may be committed by now; they are left out, so the
	// page is what the member row allowed at hi.
	page := chat.Page{Messages: []chat.Message{}, MaxSeq: hi}
	// One statement reads the page with its reactions (folded per row)
	// and whether each message has attachments; those, rare, are read
	// after it.
	var rows pgx.Rows
	if q.Backward {
		rows, err = db.pool.Query(ctx, `SELECT `+pageColumns+` FROM messages m
			WHERE m.conv_id = $1 AND m.seq < $2 AND m.seq >= $3 ORDER BY m.seq DESC LIMIT $4`, conv, min(q.Before, hi+1), lo, q.Limit+1)
	} else {
		rows, err = db.pool.Query(ctx, `SELECT `+pageColumns+` FROM messages m
			WHERE m.conv_id = $1 AND m.seq > $2 AND m.seq <= $3 ORDER BY m.seq LIMIT $4`, conv, max(q.After, lo-1), hi, q.Limit+1)
	}
	if err != nil {
		return chat.Page{}, wrap(err)
	}
	files := false
	for rows.Next() {
		m, hasFiles, err := scanPageRow(rows, conv)
		if err != nil {
			rows.Close()
			return chat.Page{}, wrap(err)
		}
		files = files || hasFiles
		page.Messages = append(page.Messages, m)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return chat.Page{}, wrap(err)
	}
	page.Completed = len(page.Messages) <= q.Limit
	if !page.Completed {
		page.Messages = page.Messages[:q.Limit]
	}
	if q.Backward {
		slices.Reverse(page.Messages)
	}
	if !files {
		return page, nil
	}
	return page, wrap(db.foldFiles(ctx, db.pool, conv, page.Messages))
}

// missingMember tells not_found (no such conversation) from not_member.
func (db *DB) missingMember(ctx context.Context, conv string) error {
	var n int
	if err := db.pool.QueryRow(ctx, `SELECT COUNT(*) FROM conversations WHERE id = $1`, conv).Scan(&n); err != nil {
		return wrap(err)
	}
	if n == 0 {
		return chat.Errorf(chat.ENotFound, "conversation not found")
	}
	return chat.Errorf(chat.ENotMember, "not a member of this conversation")
}
