// Package postgres keeps imserver's state in PostgreSQL, for nodes on
// several hosts: the same chat.Store as package storage (SQLite), with one
// writer per node that commits whatever is queued in one transaction (group
// commit), and a pool of connections for reads.
//
// Ordering across nodes: seqs of a conversation are taken under its row's
// lock, versions under the version counter row's lock, each held to COMMIT
// (writer.go). A transaction that takes seqs or versions after another
// therefore commits after it, and a reader's snapshot always holds a prefix
// of both: a client syncing "after version V" or "after seq S" never skips
// an entry that commits later with a smaller number. A batch of messages
// takes the counter last, so the writers of several nodes overlap except
// for one statement and the commit; a batch with other writes takes it
// first. Each transaction carries a whole batch of its node's writes.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/imserver/imserver/chat"
	"github.com/imserver/imserver/internal/retention"
	"github.com/imserver/imserver/seq"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// Options tune the store.
type Options struct {
	// BatchSize bounds the jobs of one write transaction.
	BatchSize int
	// BatchDelay is how long the writer waits for more jobs after the first
	// of a batch; 0 takes only what is already queued.
	BatchDelay time.Duration
	// MaxConns is the size of the connection pool (readers and the writer).
	MaxConns int32
	// BatchTimeout bounds one write transaction, so that a PostgreSQL that
	// stops answering (a cut link) fails the batch instead of stalling the
	// writer forever.
	BatchTimeout time.Duration
	// OnCommit receives every batch of newly stored messages right after
	// its commit, in seq order.
	OnCommit func([]chat.Message)
	// Metrics observes the writer; nil for none.
	Metrics WriterMetrics
	// Logger gets the writer's two health lines (writes start failing,
	// writes succeed again); nil for none.
	Logger *slog.Logger
	// Redis, when set, allocates seqs in blocks whose bound is persisted in
	// the write transaction; without it seqs come from the conversation row.
	Redis       redis.UniversalClient
	RedisPrefix string
	RedisAlloc  seq.RedisAllocOptions

	// Retention, when above 0, deletes messages older than it in the
	// background (retention.go): a pass at start and every RetentionEvery
	// (default an hour), RetentionBatch messages per transaction at most
	// (default 500).
	Retention      time.Duration
	RetentionEvery time.Duration
	RetentionBatch int
	// Clock stamps messages (ms since the epoch); tests set it.
	Clock func() int64

	links *linker // shared by the DB and its writer (files.go)
}

// WriterMetrics observes the group commit.
type WriterMetrics interface {
	Batch(jobs, messages int, commit time.Duration)
}

// WriteErrorMetrics counts failed write transactions by writehealth's
// kind; Options.Metrics may implement it.
type WriteErrorMetrics interface {
	WriteError(kind string)
}

// DB is the PostgreSQL store. It implements chat.Store.
type DB struct {
	pool *pgxpool.Pool
	opts Options
	w    *writer

	retention *retention.Job // nil without Options.Retention
}

var _ chat.Store = (*DB)(nil)

// connectTimeout bounds connecting at start, so that a wrong host fails
// quickly and clearly.
const connectTimeout = 10 * time.Second

// Open connects to the database at url (postgres://user:pass@host/db),
// migrates it and starts the writer.
func Open(ctx context.Context, url string, opts Options) (*DB, error) {
	if opts.BatchSize <= 0 {
		opts.BatchSize = 1000
	}
	if opts.MaxConns <= 0 {
		opts.MaxConns = 16
	}
	if opts.BatchTimeout <= 0 {
		opts.BatchTimeout = 10 * time.Second
	}
	if opts.Clock == nil {
		opts.Clock = nowMS
	}
	if opts.OnCommit == nil {
		opts.OnCommit = func([]chat.Message) {}
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgx's parse errors never repeat the password.
		return nil, fmt.Errorf("postgres: bad database URL: %w", err)
	}
	cfg.MaxConns = opts.MaxConns
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	where := fmt.Sprintf("%s@%s:%d/%s", cfg.ConnConfig.User, cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres %s: %w", where, err)
	}
	pctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres %s: cannot connect: %w", where, err)
	}
	if err := migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres %s: %w", where, err)
	}
	if err := backfillSearch(ctx, pool); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres %s: %w", where, err)
	}
	opts.links = &linker{}
	db := &DB{pool: pool, opts: opts}
	var seqs seqSource = rowSeqs{}
	if opts.Redis != nil {
		seqs = newRedisSeqs(seq.NewRedisAllocator(opts.Redis, opts.RedisPrefix, txBounds{}, opts.RedisAlloc))
	}
	db.w = newWriter(pool, seqs, opts)
	db.startRetention()
	return db, nil
}

// Close stops the writer after the queued jobs and closes the pool.
func (db *DB) Close() error {
	if db.retention != nil {
		db.retention.Stop()
	}
	db.w.close()
	db.pool.Close()
	return nil
}

// Ping checks that the database answers and that writes commit (for
// /healthz): a node that can read but not write cannot take messages. A
// failure stops counting healthFresh after the last write that met it: a
// node no traffic reaches any more (a readiness probe took it out after
// the failure) must be let back in to find out whether writes work again.
// (A commit of our own cannot tell: an empty one succeeds on a full disk.)
func (db *DB) Ping(ctx context.Context) error {
	if err := db.w.health.Recent(healthFresh); err != nil {
		return err
	}
	err := wrap(db.pool.Ping(ctx))
	var ce *chat.Error
	if err != nil && !errors.As(err, &ce) {
		// A refused connection (a wrong password after a rotation, a
		// database gone) is PostgreSQL's error, which names the user,
		// the database and the host: /healthz, which needs no token,
		// says only that the database is unavailable.
		return fmt.Errorf("%w: %w", errUnavailable, err)
	}
	return err
}

// healthFresh is how long a failed write keeps /healthz failing.
const healthFresh = 30 * time.Second

// Pool is the connection pool, for tools (migrate-to-postgres) and tests.
func (db *DB) Pool() *pgxpool.Pool { return db.pool }

var errUnavailable = chat.Errorf(chat.EUnavailable, "the database is unavailable")

// wrap turns what the database or the network did into the errors the
// domain knows. Lost connections, a server shutting down or restarting,
// too many connections and timeouts are `unavailable`: the client retries
// (with its client_msg_id, which dedup makes safe) and the node keeps
// running until PostgreSQL is back. Anything else stays an internal error.
func wrap(err error) error {
	if err == nil {
		return nil
	}
	var ce *chat.Error
	if errors.As(err, &ce) || errors.Is(err, pgx.ErrNoRows) || errors.Is(err, context.Canceled) {
		return err
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case len(pe.Code) >= 2 && (pe.Code[:2] == "08" || pe.Code[:2] == "53" || pe.Code[:2] == "57"),
			pe.Code == "40001", pe.Code == "40P01", pe.Code == "25006", // serialization, deadlock, read-only standby
			pe.Code == "25P03", pe.Code == "58030": // session ended idle in a transaction, I/O error
			return fmt.Errorf("%w: %w", errUnavailable, pe) // pe: failureKind reads its code
		case pe.Code == "22021":
			// Text PostgreSQL cannot hold (a NUL character, invalid
			// UTF-8). The service refuses it before it reaches a store
			// (chat/text.go); this is the store's own answer.
			return chat.Errorf(chat.EBadRequest, "text with a NUL character or invalid UTF-8 cannot be stored")
		case pe.Code[:2] == "22":
			// Data PostgreSQL cannot hold (a number out of range): the
			// request's fault.
			return chat.Errorf(chat.EBadRequest, "invalid value: %s", pe.Message)
		}
		return err
	}
	// Not an answer of the server: the connection failed, timed out or was
	// closed under us.
	return errors.Join(errUnavailable, err)
}

func isUnique(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

func nowMS() int64 { return time.Now().UnixMilli() }
