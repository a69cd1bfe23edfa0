package storage

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/imserver/imserver/chat"
)

// openMigrated opens a schema 5 database with the given copy batch and
// returns the store and what migration 0006 logged.
func openMigrated(t *testing.T, path string, batch int) (*DB, string) {
	t.Helper()
	defer SetKeysBatchForTest(keysBatch)
	SetKeysBatchForTest(batch)
	var log bytes.Buffer
	db, err := Open(context.Background(), path, Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, log.String()
}

// TestMigrateKeys: a database made by schema 5 is copied into the
// integer-keyed messages table in batches; every message reads back as it
// was (sender text ids, a deleted account's too, mutation columns), the
// old table and the progress row are gone, and the dedup still holds
// across the migration: a retry of a pre-migration client_msg_id gets its
// old seq, a new one the next seq.
func TestMigrateKeys(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v5.db")
	want, err := MakeSchema5ForTest(path, 3, 2, 101)
	if err != nil {
		t.Fatal(err)
	}
	db, log := openMigrated(t, path, 7)
	if n := strings.Count(log, "migration 0006 (integer keys): copying messages"); n != 15 {
		t.Fatalf("%d progress lines for 101 messages in batches of 7, want 15:\n%s", n, log)
	}
	if v, err := db.SchemaVersion(ctx); err != nil || v != KnownSchema() || v < keysVersion {
		t.Fatalf("schema %d (%v), want %d", v, err, KnownSchema())
	}
	if s, err := db.IntegrityCheck(); err != nil || s != "ok" {
		t.Fatalf("integrity_check: %q %v", s, err)
	}
	var left int
	if err := db.readers.QueryRow(`SELECT (SELECT COUNT(*) FROM sqlite_master WHERE name IN ('messages_v6', 'messages_dedup', 'messages_target'))
		+ (SELECT COUNT(*) FROM settings WHERE name = ?)`, keysProgress).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d leftovers of the migration (%v)", left, err)
	}
	senders := []string{"gone", "u0", "u1", "u2"}
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
			var n int
			fmt.Sscanf(m.ClientMsgID, "c%d", &n)
			if m.Seq != int64(i+1) || m.ClientMsgID != want[conv][i] || m.From != senders[(n/2)%4] || m.TS != int64(1000+n) {
				t.Fatalf("%s message %d: %+v", conv, i, m)
			}
			if n%10 == 9 && (m.Kind != chat.KindReaction || m.Target != m.Seq-1 || m.Emoji != "👍" || m.On == nil || !*m.On) {
				t.Fatalf("%s: reaction %+v", conv, m)
			}
			if n%10 != 9 && (m.Kind != chat.KindText || m.Body != fmt.Sprint("message ", n)) {
				t.Fatalf("%s: text %+v", conv, m)
			}
		}
	}
	// c4 went to g0 as its 3rd message, from u1 ((4/2)%4 = 2).
	m, dup, err := db.Append(ctx, chat.Message{Conv: "g0", From: "u1", ClientMsgID: "c4", Kind: chat.KindText, Body: "again"})()
	if err != nil || !dup || m.Seq != 3 || m.Body != "message 4" {
		t.Fatalf("retry of a pre-migration message: %+v dup %v %v, want seq 3 dup", m, dup, err)
	}
	m, dup, err = db.Append(ctx, chat.Message{Conv: "g0", From: "u1", ClientMsgID: "new", Kind: chat.KindText, Body: "after"})()
	if err != nil || dup || m.Seq != int64(len(want["g0"])+1) {
		t.Fatalf("new message: %+v dup %v %v, want seq %d", m, dup, err, len(want["g0"])+1)
	}
	list, err := db.ConversationsSince(ctx, "u2", 0, chat.MaxPageLimit)
	if err != nil || len(list.Conversations) != 2 {
		t.Fatalf("list: %+v %v", list, err)
	}
	for _, c := range list.Conversations {
		if c.ID == "g0" && (c.LastMessage == nil || c.LastMessage.ClientMsgID != "new" || c.LastMessage.From != "u1") {
			t.Fatalf("g0's last message %+v", c.LastMessage)
		}
	}
}

// collide makes every client_msg_id hash to the same value until the test
// ends.
func collide(t *testing.T) {
	old := cmidHash
	cmidHash = func(string) int64 { return 1<<63 - 2 } // the slots wrap past the largest int64
	t.Cleanup(func() { cmidHash = old })
}

// TestCmidHashCollision: client_msg_ids of one sender that share a hash
// are stored as different messages (the next free slots), each retry gets
// its own message back, whether plain, a reply or copied by the
// migration; and a fifth one is refused with a clear error rather than
// merged.
func TestCmidHashCollision(t *testing.T) {
	ctx := context.Background()
	collide(t)
	path := filepath.Join(t.TempDir(), "v5.db")
	if _, err := MakeSchema5ForTest(path, 1, 1, 4); err != nil {
		t.Fatal(err)
	}
	// One group, one user: the senders alternate, gone sent c0 and c2
	// (seqs 1, 3), u0 c1 and c3 (2, 4): both pairs collide in the copy.
	db, _ := openMigrated(t, path, 2)
	for _, c := range []struct {
		cmid string
		seq  int64
	}{{"c1", 2}, {"c3", 4}} {
		m, dup, err := db.Append(ctx, chat.Message{Conv: "g0", From: "u0", ClientMsgID: c.cmid, Kind: chat.KindText, Body: "x"})()
		if err != nil || !dup || m.Seq != c.seq {
			t.Fatalf("retry of %s: %+v dup %v %v, want seq %d", c.cmid, m, dup, err, c.seq)
		}
	}
	// Two more: a plain text and a reply, both colliding with c1 and c3.
	a, dup, err := db.Append(ctx, chat.Message{Conv: "g0", From: "u0", ClientMsgID: "plain", Kind: chat.KindText, Body: "p"})()
	if err != nil || dup || a.Seq != 5 {
		t.Fatalf("colliding plain message: %+v dup %v %v", a, dup, err)
	}
	b, dup, err := db.Append(ctx, chat.Message{Conv: "g0", From: "u0", ClientMsgID: "reply", Kind: chat.KindText, Body: "r", ReplyTo: 2})()
	if err != nil || dup || b.Seq != 6 {
		t.Fatalf("colliding reply: %+v dup %v %v", b, dup, err)
	}
	for _, c := range []struct {
		cmid string
		seq  int64
	}{{"plain", 5}, {"reply", 6}, {"c1", 2}, {"c3", 4}} {
		m, dup, err := db.Append(ctx, chat.Message{Conv: "g0", From: "u0", ClientMsgID: c.cmid, Kind: chat.KindText, Body: "x"})()
		if err != nil || !dup || m.Seq != c.seq {
			t.Fatalf("retry of %s: %+v dup %v %v, want seq %d", c.cmid, m, dup, err, c.seq)
		}
	}
	// All four slots of u0's hash are taken: refused, not merged.
	_, _, err = db.Append(ctx, chat.Message{Conv: "g0", From: "u0", ClientMsgID: "fifth", Kind: chat.KindText, Body: "x"})()
	if err == nil || !strings.Contains(err.Error(), "share the hash") {
		t.Fatalf("a fifth colliding client_msg_id: %v, want a refusal", err)
	}
	p, err := db.Messages(ctx, "g0", "u0", chat.PageQuery{Limit: 100})
	if err != nil || len(p.Messages) != 6 {
		t.Fatalf("%d messages (%v), want 6", len(p.Messages), err)
	}
	if s, err := db.IntegrityCheck(); err != nil || s != "ok" {
		t.Fatalf("integrity_check: %q %v", s, err)
	}
}
