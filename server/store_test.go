package server_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/imserver/imserver/chat"
	"github.com/imserver/imserver/internal/pgtest"
	"github.com/imserver/imserver/postgres"
	"github.com/imserver/imserver/server"
	"github.com/imserver/imserver/storage"
)

// The protocol tests run on SQLite, or on PostgreSQL when
// IMSERVER_TEST_STORE=postgres (make test runs both): TestMain then starts
// one PostgreSQL for the binary and each server gets a schema of its own.
var testPG *pgtest.Server

func TestMain(m *testing.M) {
	switch store := os.Getenv("IMSERVER_TEST_STORE"); store {
	case "", "sqlite":
	case "postgres":
		var err error
		if testPG, err = pgtest.Start(""); err != nil {
			fmt.Fprintln(os.Stderr, "starting PostgreSQL for the tests:", err)
			os.Exit(1)
		}
	default:
		fmt.Fprintf(os.Stderr, "IMSERVER_TEST_STORE=%q: want sqlite or postgres\n", store)
		os.Exit(2)
	}
	code := m.Run()
	if testPG != nil {
		testPG.Stop()
	}
	os.Exit(code)
}

// testDBPath is where a test server keeps its data: a SQLite file, or a
// PostgreSQL URL of a fresh schema.
func testDBPath(t *testing.T) string {
	if testPG != nil {
		return testPG.NewDB(t)
	}
	return filepath.Join(t.TempDir(), "imserver.db")
}

type testStore interface {
	chat.Store
	Ping(context.Context) error
	Close() error
}

// openStore opens the test server's store with the test's options.
func (ts *testServer) openStore(onCommit func([]chat.Message), onBatch func([]chat.Message, func()), metrics *server.Metrics, log *slog.Logger) (testStore, string) {
	t := ts.t
	t.Helper()
	opts := ts.cfg.storage
	if testPG != nil {
		db, err := postgres.Open(context.Background(), ts.path, postgres.Options{
			BatchSize:  opts.BatchSize,
			BatchDelay: opts.BatchDelay,
			OnCommit:   onCommit,
			Metrics:    metrics,
			Logger:     log,
			Redis:      opts.Redis,

			Retention:      opts.Retention,
			RetentionEvery: opts.RetentionEvery,
			RetentionBatch: opts.RetentionBatch,
			Clock:          opts.Clock,
		})
		if err != nil {
			t.Fatalf("postgres.Open: %v", err)
		}
		return db, "postgres"
	}
	opts.OnBatch = onBatch
	opts.Metrics = metrics
	opts.Logger = log
	db, err := storage.Open(context.Background(), ts.path, opts)
	if err != nil {
		t.Fatalf("storage.Open: %v", err)
	}
	return db, "sqlite"
}
