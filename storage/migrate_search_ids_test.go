package storage

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/imserver/imserver/chat"
)

// TestMigrateSearchIDs: a database as schema 15 left it, its index
// complete under document numbers of their own (not the messages' ids),
// one message edited with a word its edit took out kept in the index
// (stale), one deleted. Migration 0016 makes the index again under the
// ids: after the job, every text with a body is found by its current
// words under its own id, the stale word and the deleted body by
// nothing, search_docs is gone, and a message sent afterwards is
// indexed at once under its id.
func TestMigrateSearchIDs(t *testing.T) {
	const n = 30
	ctx := context.Background()
	path := oldSearchDatabase(t, n)
	raw, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if err := migrateTo(ctx, raw, 15, slog.Default()); err != nil {
		t.Fatal(err)
	}
	// As 0015's writer left it: documents numbered apart from the ids,
	// all indexed; seq 3 edited (body "edited zebra", "gnu" kept as
	// stale), seq 4 deleted.
	stmts := []string{
		`UPDATE search_docs SET doc = doc + 1000`,
		`UPDATE messages SET doc = doc + 1000`,
		`UPDATE messages SET body = 'edited zebra', stale = 'gnu', edited_at = 1 WHERE seq = 3`,
		`UPDATE messages SET body = '', deleted = 1, doc = NULL WHERE seq = 4`,
		`DELETE FROM search_docs WHERE seq = 4`,
		`INSERT INTO messages_fts (rowid, body) SELECT doc, body || COALESCE(' ' || stale, '') FROM messages WHERE doc IS NOT NULL ORDER BY doc`,
		`UPDATE search_backfill SET pending = 0`,
	}
	for _, q := range stmts {
		if _, err := raw.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var ids []int64
	rows, err := raw.Query(`SELECT id FROM messages WHERE kind = 'text' AND body <> '' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	raw.Close()
	if len(ids) != n-1 || ids[len(ids)-1] >= 1000 {
		t.Fatalf("ids of the texts: %v", ids)
	}

	db, err := Open(ctx, path, Options{SearchBackfillBatch: 7})
	if err != nil {
		t.Fatal(err)
	}
	waitIndexed(t, db)
	for q, want := range map[string]string{
		"zebra": "[3]", "gnu": "[]", "w4": "[]", "w3": "[]", "w17": "[17]", "w30": "[30]",
	} {
		if got := fmt.Sprint(seqsOf(searchFor(t, db, q))); got != want {
			t.Errorf("search %q: %s, want %s", q, got, want)
		}
	}
	if res := searchFor(t, db, "old message"); len(res.Results) != n-2 || res.Results[0].Message.Seq != n {
		t.Errorf("every unedited message, newest first: %v", seqsOf(res))
	}
	sent, _, err := db.Append(ctx, chat.Message{Conv: "g1", From: "u", ClientMsgID: "after", Kind: chat.KindText, Body: "sent after the upgrade"})()
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(seqsOf(searchFor(t, db, "upgrade"))); got != fmt.Sprint([]int64{sent.Seq}) {
		t.Errorf("a message sent after the upgrade: %s, want [%d]", got, sent.Seq)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	raw, err = sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var tables, stale int
	if err := raw.QueryRow(`SELECT COUNT(*) FROM sqlite_master WHERE name = 'search_docs'`).Scan(&tables); err != nil || tables != 0 {
		t.Errorf("search_docs still there (%d, %v)", tables, err)
	}
	if err := raw.QueryRow(`SELECT COUNT(*) FROM messages WHERE stale IS NOT NULL`).Scan(&stale); err != nil || stale != 0 {
		t.Errorf("%d messages keep stale words (%v)", stale, err)
	}
	if _, err := raw.Exec(`INSERT INTO messages_fts (messages_fts) VALUES ('integrity-check')`); err != nil {
		t.Fatalf("integrity-check: %v", err)
	}
	if _, err := raw.Exec(`CREATE VIRTUAL TABLE temp.inst USING fts5vocab(main, messages_fts, instance)`); err != nil {
		t.Fatal(err)
	}
	// Each document is a message's id and holds that message's words,
	// each once.
	rows, err = raw.Query(`SELECT i.doc, group_concat(i.term, ' '), m.body FROM temp.inst i LEFT JOIN messages m ON m.id = i.doc GROUP BY i.doc ORDER BY i.doc`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var docs []int64
	for rows.Next() {
		var doc int64
		var terms string
		var body sql.NullString
		if err := rows.Scan(&doc, &terms, &body); err != nil {
			t.Fatal(err)
		}
		docs = append(docs, doc)
		got := strings.Fields(terms)
		want, _ := asciiWords(body.String)
		slices.Sort(got)
		slices.Sort(want)
		want = slices.Compact(want)
		if !slices.Equal(got, want) {
			t.Errorf("document %d holds %v, its message's body %q", doc, got, body.String)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var sentID int64
	if err := raw.QueryRow(`SELECT id FROM messages WHERE client_msg_id = 'after'`).Scan(&sentID); err != nil {
		t.Fatal(err)
	}
	ids = append(ids, sentID)
	if !slices.Equal(docs, ids) {
		t.Errorf("documents %v, want the texts' ids %v", docs, ids)
	}
}
