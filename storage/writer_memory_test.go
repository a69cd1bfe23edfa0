package storage

import (
	"context"
	"fmt"
	"math/bits"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/imserver/imserver/chat"
	"github.com/imserver/imserver/internal/redistest"
)

// Helpers of the tests of the writer's memory (live set, mutation counts):
// messages of group "g", and two processes sharing one file.

// send appends m and returns its seq.
func send(t *testing.T, db *DB, m chat.Message) int64 {
	t.Helper()
	got, _, err := db.Append(context.Background(), m)()
	if err != nil {
		t.Fatalf("send %s %s: %v", m.Kind, m.ClientMsgID, err)
	}
	return got.Seq
}

// try appends m and returns only its error.
func try(db *DB, m chat.Message) error {
	_, _, err := db.Append(context.Background(), m)()
	return err
}

func textMsg(from, id string) chat.Message {
	return chat.Message{Conv: "g", From: from, ClientMsgID: id, Kind: chat.KindText, Body: "text " + id}
}

func reactMsg(from, id string, target int64) chat.Message {
	on := true
	return chat.Message{Conv: "g", From: from, ClientMsgID: id, Kind: chat.KindReaction, Target: target, Emoji: "+1", On: &on}
}

func deleteMsg(from, id string, target int64) chat.Message {
	return chat.Message{Conv: "g", From: from, ClientMsgID: id, Kind: chat.KindDelete, Target: target}
}

// openGroup opens a store with group g of u and v, on a clock that moves
// 1 ms each time it is read (retention cuts by it).
func openGroup(t *testing.T) (*DB, *atomic.Int64) {
	t.Helper()
	now := new(atomic.Int64)
	db, _ := openTest(t, Options{Clock: func() int64 { return now.Add(1) }})
	if err := db.CreateGroup(context.Background(), "g", "g", "u", []string{"v"}); err != nil {
		t.Fatal(err)
	}
	return db, now
}

// texts appends n texts from u to g and returns their seqs.
func texts(t *testing.T, db *DB, n int) []int64 {
	t.Helper()
	var seqs []int64
	for i := range n {
		seqs = append(seqs, send(t, db, textMsg("u", fmt.Sprint("t", i))))
	}
	return seqs
}

// openShared opens two stores on one file, as two processes sharing it
// with seqs from Redis.
func openShared(t *testing.T) (a, b *DB) {
	t.Helper()
	rdb := redistest.Client(t)
	path := filepath.Join(t.TempDir(), "two.db")
	open := func() *DB {
		db, err := Open(context.Background(), path, Options{Redis: rdb, RedisPrefix: "shared"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	return open(), open()
}

// keyOf returns the integer key of the conversation id.
func keyOf(t *testing.T, db *DB, id string) int64 {
	t.Helper()
	var k int64
	if err := db.readers.QueryRow(`SELECT key FROM ids WHERE id = ?`, id).Scan(&k); err != nil {
		t.Fatal(err)
	}
	return k
}

// count returns how many seqs l knows live.
func (l *liveTexts) count() int {
	n := 0
	for _, c := range l.convs {
		for _, w := range c.bits {
			n += bits.OnesCount64(w)
		}
	}
	return n
}
