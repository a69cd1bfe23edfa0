package storage

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/imserver/imserver/chat"
)

// TestEraseAttachments: erasing a message's attachments deletes its links
// and the rows of files no other message attaches, and hands their
// contents to the freed hook after the commit; a file another message
// still attaches keeps its row.
func TestEraseAttachments(t *testing.T) {
	db, _ := openTest(t, Options{})
	ctx := context.Background()
	var mu sync.Mutex
	var freed []string
	db.SetFilesFreed(func(h []string) {
		mu.Lock()
		freed = append(freed, h...)
		mu.Unlock()
	})
	for _, u := range []string{"alice", "bob"} {
		if err := db.CreateUser(ctx, chat.User{ID: u, Username: u, DisplayName: u}, "x"); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.CreateGroup(ctx, "g", "team", "alice", []string{"bob"}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct{ id, sha string }{{"f1", "aa"}, {"f2", "bb"}} {
		if err := db.CreateFile(ctx, chat.FileRecord{File: chat.File{ID: f.id, Name: f.id, Size: 1, Mime: "text/plain"}, Uploader: "alice", SHA256: f.sha, CreatedAt: 1}); err != nil {
			t.Fatal(err)
		}
	}
	send := func(cmid string, ids ...string) chat.Message {
		var files []chat.File
		for _, id := range ids {
			files = append(files, chat.File{ID: id})
		}
		m, _, err := db.Append(ctx, chat.Message{Conv: "g", From: "alice", ClientMsgID: cmid, Kind: chat.KindText, Attachments: files})()
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Attachments) != len(ids) {
			t.Fatalf("stored %d attachments, want %d", len(m.Attachments), len(ids))
		}
		return m
	}
	m1 := send("1", "f1", "f2")
	send("2", "f2")
	// Bob cannot attach alice's upload.
	if _, _, err := db.Append(ctx, chat.Message{Conv: "g", From: "bob", ClientMsgID: "b", Kind: chat.KindText, Attachments: []chat.File{{ID: "f1"}}})(); chat.ErrorCode(err) != chat.ENotFound {
		t.Fatalf("attaching another's file: %v", err)
	}
	if err := db.w.exec(ctx, func(t *wtx) error { return eraseAttachments(t, m1.Conv, m1.Seq) }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(freed, []string{"aa"}) {
		t.Fatalf("freed %v, want [aa]", freed)
	}
	if _, err := db.FileByID(ctx, "f1"); chat.ErrorCode(err) != chat.ENotFound {
		t.Fatalf("f1 after the erase: %v", err)
	}
	if _, err := db.FileFor(ctx, "f2", "bob"); err != nil {
		t.Fatalf("f2, still attached to message 2: %v", err)
	}
	p, err := db.Messages(ctx, "g", "bob", chat.PageQuery{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Messages) != 2 || len(p.Messages[0].Attachments) != 0 || len(p.Messages[1].Attachments) != 1 {
		t.Fatalf("page after the erase: %+v", p.Messages)
	}
}

// Retention takes a message's attachments with it: the links go, and a
// file that no newer message holds is freed.
func TestRetentionErasesAttachments(t *testing.T) {
	var now atomic.Int64
	now.Store(1_000_000)
	db, _ := openTest(t, Options{Clock: func() int64 { return now.Add(1) }})
	ctx := context.Background()
	var mu sync.Mutex
	var freed []string
	db.SetFilesFreed(func(h []string) {
		mu.Lock()
		freed = append(freed, h...)
		mu.Unlock()
	})
	if err := db.CreateUser(ctx, chat.User{ID: "alice", Username: "alice", DisplayName: "alice"}, "x"); err != nil {
		t.Fatal(err)
	}
	if err := db.CreateGroup(ctx, "g", "team", "alice", nil); err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct{ id, sha string }{{"old", "aa"}, {"kept", "bb"}} {
		if err := db.CreateFile(ctx, chat.FileRecord{File: chat.File{ID: f.id, Name: f.id, Size: 1, Mime: "text/plain"}, Uploader: "alice", SHA256: f.sha, CreatedAt: 1}); err != nil {
			t.Fatal(err)
		}
	}
	send := func(cmid string, ids ...string) {
		var files []chat.File
		for _, id := range ids {
			files = append(files, chat.File{ID: id})
		}
		if _, _, err := db.Append(ctx, chat.Message{Conv: "g", From: "alice", ClientMsgID: cmid, Kind: chat.KindText, Attachments: files})(); err != nil {
			t.Fatal(err)
		}
	}
	send("1", "old", "kept")
	now.Store(2_000_000)
	send("2", "kept")
	if _, err := db.DeleteBefore(ctx, time.UnixMilli(1_500_000)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := slices.Clone(freed)
	mu.Unlock()
	if !slices.Equal(got, []string{"aa"}) {
		t.Fatalf("freed %v, want [aa]", got)
	}
	if _, err := db.FileByID(ctx, "old"); chat.ErrorCode(err) != chat.ENotFound {
		t.Fatalf("the old message's file after retention: %v", err)
	}
	if _, err := db.FileByID(ctx, "kept"); err != nil {
		t.Fatalf("a file a newer message holds: %v", err)
	}
}
