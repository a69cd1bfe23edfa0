package postgres

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/imserver/imserver/chat"
)

// TestRetentionTakesV11Along: retention deletes old messages with what
// hangs off them (reactions, mentions, unread exclusions, attachments and
// the bytes no other message holds, search vectors), stops at the first
// message inside the window, and leaves seqs to grow from where they were.
func TestRetentionTakesV11Along(t *testing.T) {
	ctx := context.Background()
	var back atomic.Int64
	back.Store(int64(time.Hour / time.Millisecond))
	db := openTest(t, pg.NewDB(t), Options{Clock: func() int64 { return time.Now().UnixMilli() - back.Load() }, RetentionBatch: 2})
	var mu sync.Mutex
	var freed []string
	db.SetFilesFreed(func(h []string) { mu.Lock(); freed = append(freed, h...); mu.Unlock() })
	if err := db.CreateGroup(ctx, "g", "g", "u", []string{"v"}); err != nil {
		t.Fatal(err)
	}
	if err := db.CreateFile(ctx, chat.FileRecord{File: chat.File{ID: "f", Name: "a.txt", Size: 1, Mime: "text/plain"}, Uploader: "u", SHA256: "abc", CreatedAt: 1}); err != nil {
		t.Fatal(err)
	}
	on := true
	for _, m := range []chat.Message{
		{ClientMsgID: "1", From: "u", Kind: chat.KindText, Body: "old apple", Mentions: []string{"v"}},
		{ClientMsgID: "2", From: "v", Kind: chat.KindReaction, Target: 1, Emoji: "+1", On: &on},
		{ClientMsgID: "3", From: "u", Kind: chat.KindText, Body: "old file", Attachments: []chat.File{{ID: "f"}}},
	} {
		m.Conv = "g"
		if _, _, err := db.Append(ctx, m)(); err != nil {
			t.Fatal(err)
		}
	}
	back.Store(0)
	if _, _, err := db.Append(ctx, chat.Message{Conv: "g", From: "u", ClientMsgID: "4", Kind: chat.KindText, Body: "new apple"})(); err != nil {
		t.Fatal(err)
	}
	n, err := db.DeleteBefore(ctx, time.Now().Add(-10*time.Minute))
	if err != nil || n != 3 {
		t.Fatalf("deleted %d, %v; want 3", n, err)
	}
	p, err := db.Messages(ctx, "g", "v", chat.PageQuery{Limit: 10})
	if err != nil || len(p.Messages) != 1 || p.Messages[0].Seq != 4 || p.MaxSeq != 4 {
		t.Fatalf("page after retention: %+v, %v", p, err)
	}
	sq, _ := chat.ParseSearch("apple")
	sq.Limit = 10
	res, err := db.Search(ctx, "v", sq)
	if err != nil || len(res.Results) != 1 || res.Results[0].Message.Seq != 4 {
		t.Fatalf("search after retention: %+v, %v", res, err)
	}
	var left int
	if err := db.pool.QueryRow(ctx, `SELECT (SELECT COUNT(*) FROM reactions) + (SELECT COUNT(*) FROM mentions) + (SELECT COUNT(*) FROM uncounted)
		+ (SELECT COUNT(*) FROM message_files) + (SELECT COUNT(*) FROM files)`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d rows hang off deleted messages, %v", left, err)
	}
	mu.Lock()
	if !slices.Equal(freed, []string{"abc"}) {
		t.Errorf("freed %v, want the attached file's bytes", freed)
	}
	mu.Unlock()
	if m, _, err := db.Append(ctx, chat.Message{Conv: "g", From: "u", ClientMsgID: "5", Kind: chat.KindText, Body: "x"})(); err != nil || m.Seq != 5 {
		t.Fatalf("next seq %d, %v; want 5", m.Seq, err)
	}
}

// TestRetentionOwnUnread: own texts past a member's marker that retention
// deletes leave its own_unread with them, so that a read marker moved
// afterwards (recounting from the rows) never makes unread grow (storage's
// TestOwnUnreadAcrossRetention).
func TestRetentionOwnUnread(t *testing.T) {
	ctx := context.Background()
	var now atomic.Int64
	now.Store(1_000_000)
	db := openTest(t, pg.NewDB(t), Options{Clock: func() int64 { return now.Add(1) }})
	if err := db.CreateGroup(ctx, "g", "g", "u", []string{"v"}); err != nil {
		t.Fatal(err)
	}
	for _, m := range []chat.Message{
		{ClientMsgID: "1", From: "v", Kind: chat.KindText, Body: "one"},
		{ClientMsgID: "2", From: "v", Kind: chat.KindText, Body: "two"},
		{ClientMsgID: "3", From: "u", Kind: chat.KindText, Body: "three"},
	} {
		m.Conv = "g"
		if _, _, err := db.Append(ctx, m)(); err != nil {
			t.Fatal(err)
		}
	}
	cut := now.Load()
	now.Add(1000)
	if _, _, err := db.Append(ctx, chat.Message{Conv: "g", ClientMsgID: "4", From: "u", Kind: chat.KindText, Body: "four"})(); err != nil {
		t.Fatal(err)
	}
	unread := func() int64 {
		t.Helper()
		c, err := db.Conversation(ctx, "g", "v")
		if err != nil {
			t.Fatal(err)
		}
		return c.Unread
	}
	if got := unread(); got != 2 {
		t.Fatalf("v's unread before retention: %d, want 2", got)
	}
	if n, err := db.DeleteBefore(ctx, time.UnixMilli(cut+1)); err != nil || n != 3 {
		t.Fatalf("retention deleted %d (%v), want 3", n, err)
	}
	if got := unread(); got != 4 {
		t.Errorf("v's unread after retention: %d, want 4 (seqs 1-4 past its marker)", got)
	}
	if _, _, err := db.SetRead(ctx, "g", "v", 1); err != nil {
		t.Fatal(err)
	}
	if got := unread(); got != 3 {
		t.Errorf("v's unread after reading 1: %d, want 3", got)
	}
}
