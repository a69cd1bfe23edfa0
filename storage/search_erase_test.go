package storage

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/imserver/imserver/chat"
)

// TestEditChainErased: a message edited twice (its index holding stale
// words) and then deleted, and another edited twice and then expired, leave
// none of their words, old or current, in the search index (fts5vocab,
// whatever the document map says) or anywhere in the database file.
func TestEditChainErased(t *testing.T) {
	ctx := context.Background()
	var now atomic.Int64
	now.Store(100)
	path := filepath.Join(t.TempDir(), "erase.db")
	db, err := Open(ctx, path, Options{Clock: func() int64 { return now.Load() }})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.CreateGroup(ctx, "g1", "g", "u", nil); err != nil {
		t.Fatal(err)
	}
	n := 0
	send := func(m chat.Message) chat.Message {
		t.Helper()
		n++
		m.Conv, m.From, m.ClientMsgID = "g1", "u", fmt.Sprint("c", n)
		if m.Kind == "" {
			m.Kind = chat.KindText
		}
		got, _, err := db.Append(ctx, m)()
		if err != nil {
			t.Fatalf("%+v: %v", m, err)
		}
		return got
	}
	edit := func(seq int64, body string) { send(chat.Message{Kind: chat.KindEdit, Target: seq, Body: body}) }
	// Expires: the message and its edits are all old.
	x := send(chat.Message{Body: "shared expiredorig"})
	edit(x.Seq, "shared expiredfirst")
	edit(x.Seq, "expiredsecond")
	now.Store(10_000)
	d := send(chat.Message{Body: "shared deletedorig"})
	edit(d.Seq, "shared deletedfirst")
	edit(d.Seq, "deletedsecond")
	send(chat.Message{Kind: chat.KindDelete, Target: d.Seq})
	send(chat.Message{Body: "shared survivor"})
	if n, err := db.DeleteBefore(ctx, time.UnixMilli(1000)); err != nil || n != 3 {
		t.Fatalf("retention deleted %d (%v), want 3", n, err)
	}
	if got := seqsOf(searchFor(t, db, "shared")); len(got) != 1 {
		t.Fatalf("search shared: %v, want the survivor alone", got)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	gone := []string{"expiredorig", "expiredfirst", "expiredsecond", "deletedorig", "deletedfirst", "deletedsecond"}
	raw, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(`INSERT INTO messages_fts (messages_fts) VALUES ('integrity-check')`); err != nil {
		t.Fatalf("integrity-check: %v", err)
	}
	if _, err := raw.Exec(`CREATE VIRTUAL TABLE temp.inst USING fts5vocab(main, messages_fts, instance)`); err != nil {
		t.Fatal(err)
	}
	for _, w := range gone {
		var c int
		if err := raw.QueryRow(`SELECT COUNT(*) FROM temp.inst WHERE term = ?`, w).Scan(&c); err != nil {
			t.Fatal(err)
		}
		if c != 0 {
			t.Errorf("the index still holds %q (%d entries)", w, c)
		}
	}
	raw.Close()
	for _, f := range []string{path, path + "-wal"} {
		data, err := os.ReadFile(f)
		if os.IsNotExist(err) {
			continue
		} else if err != nil {
			t.Fatal(err)
		}
		for _, w := range gone {
			if bytes.Contains(data, []byte(w)) {
				t.Errorf("%s still holds %q", filepath.Base(f), w)
			}
		}
	}
}
