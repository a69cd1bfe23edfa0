package storage

import (
	"context"
	"testing"
	"time"
)

// TestOwnUnreadRejoinInOneTransaction: a member's send, its leaving and its
// joining again in one transaction leave nothing of that send in its
// own_unread: the send lies before its new range, and the next text of
// someone else is its one unread message.
func TestOwnUnreadRejoinInOneTransaction(t *testing.T) {
	ctx := context.Background()
	db, _ := openGroup(t)
	send(t, db, textMsg("u", "t1"))
	started, block := make(chan struct{}), make(chan struct{})
	go db.w.exec(ctx, func(*wtx) error { close(started); <-block; return nil })
	<-started
	sent := db.Append(ctx, textMsg("v", "v2"))
	left := make(chan error, 1)
	go func() { left <- db.RemoveMember(ctx, "g", "v") }()
	waitQueued(t, db, 2)
	joined := make(chan error, 1)
	go func() {
		_, err := db.AddMembers(ctx, "g", []string{"v"})
		joined <- err
	}()
	waitQueued(t, db, 3)
	close(block)
	if _, _, err := sent(); err != nil {
		t.Fatal(err)
	}
	if err := <-left; err != nil {
		t.Fatal(err)
	}
	if err := <-joined; err != nil {
		t.Fatal(err)
	}
	send(t, db, textMsg("u", "t3"))
	if got := unread(t, db, "v"); got != 1 {
		t.Errorf("v's unread after a send, a leave and a join in one transaction and u's next text: %d, want 1", got)
	}
}

// waitQueued waits until the writer holds n jobs.
func waitQueued(t *testing.T, db *DB, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); len(db.w.queue.Jobs()) < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d jobs queued, want %d", len(db.w.queue.Jobs()), n)
		}
	}
}

// TestOwnUnreadAcrossRetention: own texts past a member's marker that
// retention deletes leave its own_unread with them, so that a read marker
// moved afterwards (recounting from the rows) never makes unread grow.
func TestOwnUnreadAcrossRetention(t *testing.T) {
	ctx := context.Background()
	db, now := openGroup(t)
	send(t, db, textMsg("v", "v1"))
	send(t, db, textMsg("v", "v2"))
	send(t, db, textMsg("u", "u3"))
	cut := now.Load()
	now.Add(1000)
	send(t, db, textMsg("u", "u4"))
	if got := unread(t, db, "v"); got != 2 {
		t.Fatalf("v's unread before retention: %d, want 2", got)
	}
	if n, err := db.DeleteBefore(ctx, time.UnixMilli(cut+1)); err != nil || n != 3 {
		t.Fatalf("retention deleted %d (%v), want 3", n, err)
	}
	// Expired seqs past the marker count as unread, as everyone's do.
	before := unread(t, db, "v")
	if before != 4 {
		t.Errorf("v's unread after retention: %d, want 4 (seqs 1-4 past its marker)", before)
	}
	if _, _, err := db.SetRead(ctx, "g", "v", 1); err != nil {
		t.Fatal(err)
	}
	if got := unread(t, db, "v"); got != 3 {
		t.Errorf("v's unread after reading 1: %d, want 3 (it was %d)", got, before)
	}
}
