package storage

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/imserver/imserver/chat"
)

// TestMigrateLayout: a database made by schema 8 is copied into the
// arrival-ordered messages table in batches; every message reads back as
// it was, in (conv, seq) order of rowids, the old table is gone, the
// indexes are the new ones, a retry of an old client_msg_id gets its old
// seq and new messages are appended after every copied row.
func TestMigrateLayout(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v8.db")
	want, err := MakeSchemaForTest(path, 8, 3, 2, 101)
	if err != nil {
		t.Fatal(err)
	}
	defer SetLayoutBatchForTest(layoutBatch)
	SetLayoutBatchForTest(7)
	db, log := openMigrated(t, path, keysBatch)
	if n := strings.Count(log, "migration 0009 (messages in arrival order): copying messages"); n != 15 {
		t.Fatalf("%d progress lines for 101 messages in batches of 7, want 15:\n%s", n, log)
	}
	if v, err := db.SchemaVersion(ctx); err != nil || v != KnownSchema() || v < layoutVersion {
		t.Fatalf("schema %d (%v), want %d", v, err, KnownSchema())
	}
	if s, err := db.IntegrityCheck(); err != nil || s != "ok" {
		t.Fatalf("integrity_check: %q %v", s, err)
	}
	var names string
	if err := db.readers.QueryRow(`SELECT group_concat(name, ' ') FROM (SELECT name FROM sqlite_master
		WHERE tbl_name IN ('messages', 'messages_v9') ORDER BY name)`).Scan(&names); err != nil {
		t.Fatal(err)
	}
	// messages_cmid, made by 0009, is gone after 0010 (the dedup levels).
	if names != "messages messages_seq messages_targets" {
		t.Fatalf("schema objects %q", names)
	}
	// Rowids follow (conv, seq): the copy's order.
	var disorder int
	if err := db.readers.QueryRow(`SELECT COUNT(*) FROM messages a JOIN messages b ON b.rowid = a.rowid + 1
		WHERE (b.conv, b.seq) < (a.conv, a.seq)`).Scan(&disorder); err != nil || disorder != 0 {
		t.Fatalf("%d rows out of (conv, seq) order (%v)", disorder, err)
	}
	for c := 0; c < 2; c++ {
		conv := fmt.Sprint("g", c)
		p, err := db.Messages(ctx, conv, "u1", chat.PageQuery{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Messages) != len(want[conv]) {
			t.Fatalf("%s: %d messages, want %d", conv, len(p.Messages), len(want[conv]))
		}
		for i, m := range p.Messages {
			if m.Seq != int64(i+1) || m.ClientMsgID != want[conv][i] {
				t.Fatalf("%s message %d: %+v, want %s", conv, i, m, want[conv][i])
			}
		}
	}
	m, dup, err := db.Append(ctx, chat.Message{Conv: "g0", From: "u1", ClientMsgID: "c4", Kind: chat.KindText, Body: "again"})()
	if err != nil || !dup || m.Seq != 3 || m.Body != "message 4" {
		t.Fatalf("retry of a pre-migration message: %+v dup %v %v, want seq 3 dup", m, dup, err)
	}
	m, dup, err = db.Append(ctx, chat.Message{Conv: "g0", From: "u1", ClientMsgID: "new", Kind: chat.KindText, Body: "after"})()
	if err != nil || dup || m.Seq != int64(len(want["g0"])+1) {
		t.Fatalf("new message: %+v dup %v %v", m, dup, err)
	}
	var last string
	if err := db.readers.QueryRow(`SELECT client_msg_id FROM messages ORDER BY rowid DESC LIMIT 1`).Scan(&last); err != nil || last != "new" {
		t.Fatalf("last row %q (%v), want the new message", last, err)
	}
}
