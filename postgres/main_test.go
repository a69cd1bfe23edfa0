package postgres

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/imserver/imserver/chat"
	"github.com/imserver/imserver/internal/pgtest"
	"github.com/imserver/imserver/storage/storetest"
)

// pg is the PostgreSQL this test binary started; each test gets a schema
// of its own.
var pg *pgtest.Server

func TestMain(m *testing.M) {
	var err error
	pg, err = pgtest.Start("")
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting PostgreSQL for the tests:", err)
		os.Exit(1)
	}
	code := m.Run()
	pg.Stop()
	os.Exit(code)
}

func openTest(t *testing.T, url string, opts Options) *DB {
	t.Helper()
	db, err := Open(context.Background(), url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestContract runs the store contract (package storetest) on PostgreSQL.
func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Opener {
		url := pg.NewDB(t)
		return func(t *testing.T, o storetest.Options) (chat.Store, func()) {
			db, err := Open(context.Background(), url, Options{BatchDelay: o.BatchDelay, OnCommit: o.OnCommit})
			if err != nil {
				t.Fatal(err)
			}
			return db, func() { db.Close() }
		}
	})
}
