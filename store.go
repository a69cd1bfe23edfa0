package main

import (
	"context"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/imserver/imserver/chat"
	"github.com/imserver/imserver/postgres"
	"github.com/imserver/imserver/seq"
	"github.com/imserver/imserver/storage"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
)

// store is what main needs of either store.
type store interface {
	chat.Store
	Ping(context.Context) error
	Close() error
	SchemaVersion(context.Context) (int, error)
}

// isPostgres reports whether db names a PostgreSQL database rather than a
// SQLite file.
func isPostgres(db string) bool {
	return strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://")
}

// displayDB is db fit for logs: a URL's password is masked.
func displayDB(db string) string {
	if !isPostgres(db) {
		return db
	}
	u, err := url.Parse(db)
	if err != nil {
		return "postgres://(unparsable URL)"
	}
	return u.Redacted()
}

// applyDB sets cfg.DB from --db over the environment (IMSERVER_DB) and
// the file.
func applyDB(cmd *cobra.Command, cfg *Config, flag string) {
	if cmd.Flags().Changed("db") {
		cfg.DB = flag
	}
}

// storeOptions is what serve wires into the store beside the config.
type storeOptions struct {
	onCommit func([]chat.Message)
	onBatch  func([]chat.Message, func())
	metrics  storage.WriterMetrics
	redis    redis.UniversalClient
	log      *slog.Logger
}

// openStore opens the store cfg.DB names and the name its health check
// goes by.
func openStore(ctx context.Context, cfg Config, o storeOptions) (store, string, error) {
	alloc := seq.RedisAllocOptions{GroupBlock: cfg.Seq.GroupBlock, DirectBlock: cfg.Seq.DirectBlock}
	if isPostgres(cfg.DB) {
		db, err := postgres.Open(ctx, cfg.DB, postgres.Options{
			BatchSize:    cfg.Postgres.BatchSize,
			BatchDelay:   cfg.Postgres.BatchDelay,
			MaxConns:     cfg.Postgres.MaxConns,
			BatchTimeout: cfg.Postgres.BatchTimeout,
			OnCommit:     o.onCommit,
			Metrics:      o.metrics,
			Logger:       o.log,
			Redis:        o.redis,
			RedisPrefix:  cfg.RedisPrefix,
			RedisAlloc:   alloc,
			Retention:    time.Duration(cfg.Retention.Days) * 24 * time.Hour,
		})
		return db, "postgres", err
	}
	db, err := storage.Open(ctx, cfg.DB, storage.Options{
		Synchronous:         cfg.SQLite.Synchronous,
		BatchSize:           cfg.SQLite.BatchSize,
		BatchDelay:          cfg.SQLite.BatchDelay,
		Readers:             cfg.SQLite.Readers,
		PipelinedSync:       cfg.SQLite.PipelinedSync,
		SearchBackfillBatch: cfg.SQLite.SearchIndexBatch,
		SearchBackfillPause: cfg.SQLite.SearchIndexPause,
		Retention:           time.Duration(cfg.Retention.Days) * 24 * time.Hour,
		OnCommit:            o.onCommit,
		OnBatch:             o.onBatch,
		Metrics:             o.metrics,
		Logger:              o.log,
		Redis:               o.redis,
		RedisPrefix:         cfg.RedisPrefix,
		RedisAlloc:          alloc,
	})
	if err != nil {
		return nil, "sqlite", err
	}
	return db, "sqlite", nil
}
