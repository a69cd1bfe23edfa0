package storage

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"testing/fstest"
)

// AddTestMigration makes migrate apply one more migration after the
// embedded ones (for the fault tests of the external test package).
func AddTestMigration(name, body string) {
	m := fstest.MapFS{}
	names, _ := fs.Glob(embeddedMigrationFiles, "migrations/*.sql")
	for _, n := range names {
		b, _ := fs.ReadFile(embeddedMigrationFiles, n)
		m[n] = &fstest.MapFile{Data: b}
	}
	m["migrations/"+name] = &fstest.MapFile{Data: []byte(body)}
	migrations = m
}

// SetTestPragmas sets pragmas every new connection runs (max_page_count
// stands for a full disk).
func SetTestPragmas(p ...string) { testPragmas = p }

// IntegrityCheck runs PRAGMA integrity_check.
func (db *DB) IntegrityCheck() (string, error) {
	var s string
	err := db.readers.QueryRow("PRAGMA integrity_check").Scan(&s)
	return s, err
}

// SetKeysBatchForTest sets how many messages each copy transaction of
// migration 0006 takes.
func SetKeysBatchForTest(n int) { keysBatch = n }

func SetLayoutBatchForTest(n int) { layoutBatch = n }

// MakeSchemaForTest is MakeSchema5ForTest migrated to schema (at least
// 5): a database as that release left it, with the rows later migrations
// must carry.
func MakeSchemaForTest(path string, schema, users, convs, msgs int) (map[string][]string, error) {
	want, err := MakeSchema5ForTest(path, users, convs, msgs)
	if err != nil {
		return nil, err
	}
	raw, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)")
	if err != nil {
		return nil, err
	}
	defer raw.Close()
	return want, migrateTo(context.Background(), raw, schema, nil)
}

// MakeSchema5ForTest makes at path a database as schema 5 left it (the
// release before integer keys), with the rows migration 0006 must carry:
// users u0..u(users-1) and "gone" (a deleted account: messages, no users
// row), groups g0..g(convs-1) with every user a member, and msgs messages
// round-robin over the groups and senders, client_msg_id "c<i>", every
// tenth a reaction to the message before it. It returns, per group, the
// client_msg_ids in seq order.
func MakeSchema5ForTest(path string, users, convs, msgs int) (map[string][]string, error) {
	ctx := context.Background()
	raw, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)")
	if err != nil {
		return nil, err
	}
	defer raw.Close()
	if err := migrateTo(ctx, raw, 5, nil); err != nil {
		return nil, err
	}
	tx, err := raw.Begin()
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	for u := 0; u < users; u++ {
		if _, err := tx.Exec(`INSERT INTO users (id, username, display_name, password_hash, created_at) VALUES (?, ?, ?, 'x', ?)`,
			fmt.Sprint("u", u), fmt.Sprint("user", u), fmt.Sprint("User ", u), u); err != nil {
			return nil, err
		}
	}
	senders := []string{"gone"}
	for u := 0; u < users; u++ {
		senders = append(senders, fmt.Sprint("u", u))
	}
	seqs := map[string][]string{}
	for i := 0; i < msgs; i++ {
		conv := fmt.Sprint("g", i%convs)
		from := senders[(i/convs)%len(senders)]
		cmid := fmt.Sprint("c", i)
		seq := len(seqs[conv]) + 1
		kind, body := "text", fmt.Sprint("message ", i)
		var target, emoji, on any
		if seq > 1 && i%10 == 9 {
			kind, body, target, emoji, on = "reaction", "", seq-1, "👍", 1
		}
		// A text has a search document, as the writer gave it.
		var doc any
		if kind == "text" {
			doc = i + 1
			if _, err := tx.Exec(`INSERT INTO search_docs (doc, conv_id, seq) VALUES (?, ?, ?)`, doc, conv, seq); err != nil {
				return nil, err
			}
		}
		if _, err := tx.Exec(`INSERT INTO messages (conv_id, seq, sender_id, client_msg_id, kind, body, ts, target, emoji, reaction_on, doc)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, conv, seq, from, cmid, kind, body, 1000+i, target, emoji, on, doc); err != nil {
			return nil, err
		}
		seqs[conv] = append(seqs[conv], cmid)
	}
	for c := 0; c < convs; c++ {
		conv := fmt.Sprint("g", c)
		if _, err := tx.Exec(`INSERT INTO conversations (id, kind, name, members_count, max_seq, version, created_at) VALUES (?, 'group', ?, ?, ?, 1, 0)`,
			conv, conv, users, len(seqs[conv])); err != nil {
			return nil, err
		}
		for u := 0; u < users; u++ {
			role := "member"
			if u == 0 {
				role = "owner"
			}
			if _, err := tx.Exec(`INSERT INTO members (conv_id, user_id, role, version, joined_at) VALUES (?, ?, ?, 1, 0)`,
				conv, fmt.Sprint("u", u), role); err != nil {
				return nil, err
			}
		}
	}
	return seqs, tx.Commit()
}
