package storage

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/imserver/imserver/chat"
	"github.com/imserver/imserver/storage/storetest"
)

// TestContract runs the store contract (package storetest) on SQLite;
// package postgres runs it on PostgreSQL.
func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Opener {
		path := filepath.Join(t.TempDir(), "test.db")
		return func(t *testing.T, o storetest.Options) (chat.Store, func()) {
			db, err := Open(context.Background(), path, Options{BatchDelay: o.BatchDelay, OnCommit: o.OnCommit})
			if err != nil {
				t.Fatal(err)
			}
			return db, func() { db.Close() }
		}
	})
}
