package storage

import (
	"context"
	"testing"
	"time"

	"github.com/imserver/imserver/chat"
)

// remembers reports whether the writer holds user's member row of g.
func remembers(db *DB, user string) bool {
	_, ok := db.w.members.rows[[2]string{"g", user}]
	return ok
}

// TestMemberRowsFollowChanges: after a sender's row is remembered, each
// change to it (a role, a cleared history, a kick, a join again) decides
// the next send as the row now says, and read markers and acks keep the
// memory.
func TestMemberRowsFollowChanges(t *testing.T) {
	ctx := context.Background()
	db, _ := openGroup(t)
	own := send(t, db, textMsg("v", "v1"))
	if !remembers(db, "v") {
		t.Fatal("v's row is not remembered after v sent")
	}
	us := texts(t, db, 2)
	if _, _, err := db.SetRead(ctx, "g", "v", us[0]); err != nil {
		t.Fatal(err)
	}
	if err := db.SaveAcks(ctx, []chat.Ack{{Conv: "g", User: "v", Seq: us[1]}}); err != nil {
		t.Fatal(err)
	}
	if !remembers(db, "v") {
		t.Fatal("a read marker or acks emptied the memory")
	}

	// A role: an admin may delete another's message, a member may not.
	if err := db.SetRole(ctx, "g", "u", "v", chat.RoleAdmin); err != nil {
		t.Fatal(err)
	}
	send(t, db, deleteMsg("v", "d1", us[0]))
	if err := db.SetRole(ctx, "g", "u", "v", chat.RoleMember); err != nil {
		t.Fatal(err)
	}
	if err := try(db, deleteMsg("v", "d2", us[1])); chat.ErrorCode(err) != chat.EForbidden {
		t.Fatalf("a member deleting another's message after being demoted: %v, want forbidden", err)
	}

	// A cleared history: what came before is out of v's reach.
	send(t, db, textMsg("v", "v2"))
	if err := db.ClearHistory(ctx, "g", "v"); err != nil {
		t.Fatal(err)
	}
	if err := try(db, reactMsg("v", "r1", own)); chat.ErrorCode(err) != chat.ENotFound {
		t.Fatalf("a reaction to a message before v's cleared history: %v, want not_found", err)
	}

	// A kick: v may no longer send.
	send(t, db, textMsg("v", "v3"))
	if err := db.KickMember(ctx, "g", "u", "v"); err != nil {
		t.Fatal(err)
	}
	if err := try(db, textMsg("v", "v4")); chat.ErrorCode(err) != chat.ENotMember {
		t.Fatalf("a send after the kick: %v, want not_member", err)
	}

	// Back in: v's range starts after the join.
	if _, err := db.AddMembers(ctx, "g", []string{"v"}); err != nil {
		t.Fatal(err)
	}
	if err := try(db, reactMsg("v", "r2", us[1])); chat.ErrorCode(err) != chat.ENotFound {
		t.Fatalf("a reaction to a message before v joined again: %v, want not_found", err)
	}
	send(t, db, textMsg("v", "v5"))

	// A row read before a kick in the same transaction is not remembered
	// after it: the next transaction reads the row again.
	started, block := make(chan struct{}), make(chan struct{})
	go db.w.exec(ctx, func(*wtx) error { close(started); <-block; return nil })
	<-started
	before := db.Append(ctx, textMsg("v", "v6"))
	kicked := make(chan error, 1)
	go func() { kicked <- db.KickMember(ctx, "g", "u", "v") }()
	for deadline := time.Now().Add(5 * time.Second); len(db.w.queue.Jobs()) < 2; {
		if time.Now().After(deadline) {
			t.Fatal("the send and the kick were not queued")
		}
		time.Sleep(time.Millisecond)
	}
	close(block)
	if _, _, err := before(); err != nil {
		t.Fatal(err)
	}
	if err := <-kicked; err != nil {
		t.Fatal(err)
	}
	if err := try(db, textMsg("v", "v7")); chat.ErrorCode(err) != chat.ENotMember {
		t.Fatalf("a send after a kick that shared a transaction with v's send: %v, want not_member", err)
	}
}

// TestMemberRowsOtherProcess: a kick or a role change made by another
// process sharing the file decides this process's next send, though this
// process remembered the row.
func TestMemberRowsOtherProcess(t *testing.T) {
	ctx := context.Background()
	a, b := openShared(t)
	if err := a.CreateGroup(ctx, "g", "g", "u", []string{"v"}); err != nil {
		t.Fatal(err)
	}
	if err := a.SetRole(ctx, "g", "u", "v", chat.RoleAdmin); err != nil {
		t.Fatal(err)
	}
	us := texts(t, a, 2)
	send(t, a, deleteMsg("v", "d1", us[0]))
	if !remembers(a, "v") {
		t.Fatal("v's row is not remembered after v sent")
	}
	if err := b.SetRole(ctx, "g", "u", "v", chat.RoleMember); err != nil {
		t.Fatal(err)
	}
	if err := try(a, deleteMsg("v", "d2", us[1])); chat.ErrorCode(err) != chat.EForbidden {
		t.Fatalf("delete in a after b demoted v: %v, want forbidden", err)
	}
	send(t, a, textMsg("v", "v1"))
	if err := b.KickMember(ctx, "g", "u", "v"); err != nil {
		t.Fatal(err)
	}
	if err := try(a, textMsg("v", "v2")); chat.ErrorCode(err) != chat.ENotMember {
		t.Fatalf("send in a after b kicked v: %v, want not_member", err)
	}
}
