package storage

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/imserver/imserver/chat"
)

func TestFailureKind(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{errors.New("no such table"), ""},
		{fmt.Errorf("write: %w", syscall.ENOSPC), "full"},
		{fmt.Errorf("write: %w", syscall.EROFS), "readonly"},
		{fmt.Errorf("write: %w", syscall.EIO), "io"},
	} {
		if got := failureKind(c.err); got != c.want {
			t.Errorf("failureKind(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

// A real SQLite refusal (a full database) is an unavailable error with a
// retry hint, the store reports it until a write succeeds, and its seqs
// are given back.
func TestFullDatabaseIsUnavailable(t *testing.T) {
	ctx := context.Background()
	db, err := Open(ctx, filepath.Join(t.TempDir(), "full.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.CreateGroup(ctx, "g", "g", "u", nil); err != nil {
		t.Fatal(err)
	}
	send := func(id string, n int) (chat.Message, error) {
		m, _, err := db.Append(ctx, chat.Message{Conv: "g", From: "u", ClientMsgID: id, Kind: chat.KindText, Body: string(make([]byte, n))})()
		return m, err
	}
	if _, err := send("a", 10); err != nil {
		t.Fatal(err)
	}
	if err := db.ExecOnWriterForTest(ctx, "PRAGMA max_page_count = 1"); err != nil {
		t.Fatal(err)
	}
	_, err = send("b", 64<<10)
	var e *chat.Error
	if !errors.As(err, &e) || e.Code != chat.EUnavailable || e.RetryAfterMS <= 0 {
		t.Fatalf("append to a full database: %v, want unavailable with a retry hint", err)
	}
	if db.WriteHealth() == nil || db.Ping(ctx) == nil {
		t.Fatal("the store does not report failing writes")
	}
	if err := db.ExecOnWriterForTest(ctx, "PRAGMA max_page_count = 1073741823"); err != nil {
		t.Fatal(err)
	}
	m, err := send("b", 64<<10)
	if err != nil || m.Seq != 2 {
		t.Fatalf("after space returned: seq %d, %v; want seq 2", m.Seq, err)
	}
	if db.WriteHealth() != nil || db.Ping(ctx) != nil {
		t.Fatal("the store still reports failing writes after one succeeded")
	}
}
