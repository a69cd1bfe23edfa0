// Package storage keeps imserver's state in SQLite: one writer connection
// that commits whatever is queued in one transaction (group commit), and a
// pool of readers that WAL lets run beside it.
package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/imserver/imserver/chat"
	"github.com/imserver/imserver/internal/retention"
	"github.com/imserver/imserver/seq"
	"github.com/redis/go-redis/v9"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Options tune the database.
type Options struct {
	// Synchronous is SQLite's synchronous mode: FULL (an acked message
	// survives power loss) or NORMAL (survives a process crash).
	Synchronous string
	// BatchSize bounds the jobs of one write transaction.
	BatchSize int
	// BatchDelay is how long the writer waits for more jobs after the first
	// of a batch; 0 takes only what is already queued, which batches
	// naturally under load without adding latency when idle.
	BatchDelay time.Duration
	// Readers is the size of the reader pool.
	Readers int
	// OnCommit receives every batch of newly stored messages right after
	// its commit, in seq order. It may block briefly (backpressure).
	OnCommit func([]chat.Message)
	// OnBatch, when set, replaces OnCommit: it receives every batch's
	// newly stored messages (nil when it failed) and a function that
	// answers the batch's AppendNotify jobs, to be called once, after
	// the messages are handed on (notify.go).
	OnBatch func(msgs []chat.Message, answer func())
	// Metrics observes the writer; nil for none. When it also implements
	// WriteErrorMetrics, it counts the transactions that failed for a
	// storage reason.
	Metrics WriterMetrics
	// Logger gets the writer's two storage-health lines (writes start
	// failing, writes succeed again); nil is slog.Default().
	Logger *slog.Logger
	// Redis, when set, allocates seqs (several processes may then share
	// the database file); RedisPrefix prefixes its keys.
	Redis       redis.UniversalClient
	RedisPrefix string
	RedisAlloc  seq.RedisAllocOptions
	// CacheKiB is the writer's page cache; 0 keeps the default (16 MiB).
	// The history generator raises it: its random dedup-index inserts
	// into a database of millions of messages miss a small cache.
	CacheKiB int
	// Clock stamps appended messages (ms since the epoch); nil is the
	// wall clock. The history generator spreads a year over its messages.
	Clock func() int64
	// Retention, when above 0, deletes messages older than it in the
	// background (retention.go), a pass at start and every RetentionEvery
	// (default an hour), RetentionBatch messages per transaction at most
	// (default 500).
	Retention      time.Duration
	RetentionEvery time.Duration
	RetentionBatch int
	// PipelinedSync moves the fsync of synchronous FULL out of COMMIT, off
	// the writer's goroutine, to the syncer (syncer.go).
	PipelinedSync bool
	// SearchBackfillBatch bounds the older messages one transaction adds
	// to the search index after an upgrade (default 500);
	// SearchBackfillPause is the writer's free time between two such
	// transactions (default 5 ms). See search_backfill.go.
	SearchBackfillBatch int
	SearchBackfillPause time.Duration

	walPath string // set by Open
}

// WriterMetrics observes the group commit.
type WriterMetrics interface {
	Batch(jobs, messages int, commit time.Duration)
}

// WriteErrorMetrics counts failed write transactions by kind: full,
// readonly or io.
type WriteErrorMetrics interface {
	WriteError(kind string)
}

// DB is the SQLite store. It implements chat.Store.
type DB struct {
	path    string
	opts    Options
	writer  *sql.DB
	readers *sql.DB
	w       *writer
	ckptDB  *sql.DB
	ckpt    *checkpointer
	links   *linker

	retention *retention.Job // nil when messages are kept forever
	backfill  *backfill      // nil when the search index is complete
	compactor *compactor     // moves full dedup levels down (dedup.go)
	keys      *keyCache      // text ids <-> integer keys (keys.go)

	closeOnce sync.Once
	closeErr  error
}

var _ chat.Store = (*DB)(nil)

// Open opens (creating if needed) the database at path and migrates it.
func Open(ctx context.Context, path string, opts Options) (*DB, error) {
	if opts.Synchronous == "" {
		opts.Synchronous = "FULL"
	}
	switch opts.Synchronous {
	case "FULL", "NORMAL", "EXTRA":
	default:
		return nil, fmt.Errorf("sqlite synchronous mode %q: want FULL, NORMAL or EXTRA", opts.Synchronous)
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = 1000
	}
	if opts.Readers <= 0 {
		opts.Readers = max(4, runtime.NumCPU()*2)
	}
	if opts.CacheKiB <= 0 {
		opts.CacheKiB = 16384
	}
	if opts.Clock == nil {
		opts.Clock = nowMS
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.OnCommit == nil {
		opts.OnCommit = func([]chat.Message) {}
	}
	opts.walPath = path + "-wal"
	// busy_timeout comes first so that the pragmas after it wait for
	// another process instead of failing.
	pragmas := []string{"busy_timeout(10000)", "journal_mode(WAL)", "synchronous(" + opts.Synchronous + ")", "foreign_keys(0)"}
	pragmas = append(pragmas, testPragmas...)
	dsn := func(extra string) string {
		q := url.Values{}
		for _, p := range pragmas {
			q.Add("_pragma", p)
		}
		return "file:" + path + "?" + q.Encode() + extra
	}
	// The writer never checkpoints: the checkpointer does, beside it. Its
	// page cache holds a whole batch (1000 messages dirty about 800 pages):
	// with SQLite's default of 2 MiB it spilled pages to the WAL in the
	// middle of transactions and reread index pages from the file.
	// secure_delete zeroes what a delete or an overwrite frees, so that an
	// erased message body is gone from the file, not just unlinked.
	writerDSN := dsn("&_txlock=immediate&_pragma=wal_autocheckpoint(0)&_pragma=cache_size(-" + strconv.Itoa(opts.CacheKiB) + ")&_pragma=secure_delete(1)")
	if opts.Synchronous != "NORMAL" && !opts.PipelinedSync {
		// Every commit syncs the WAL: its frames may be gathered and
		// written with one call (walbuf.go).
		if err := registerWalBuf(); err != nil {
			return nil, err
		}
		writerDSN += "&vfs=" + walBufVFS
	}
	w, err := sql.Open("sqlite", writerDSN)
	if err != nil {
		return nil, err
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	if err := w.PingContext(ctx); err != nil {
		w.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := migrate(ctx, w, opts.Logger); err != nil {
		w.Close()
		return nil, err
	}
	r, err := sql.Open("sqlite", dsn("&_pragma=query_only(1)"))
	if err != nil {
		w.Close()
		return nil, err
	}
	r.SetMaxOpenConns(opts.Readers)
	r.SetMaxIdleConns(opts.Readers)
	// query_only stops statements, not checkpoints.
	c, err := sql.Open("sqlite", dsn("&_pragma=query_only(1)"))
	if err != nil {
		w.Close()
		r.Close()
		return nil, err
	}
	c.SetMaxOpenConns(1)
	c.SetMaxIdleConns(1)
	c.SetConnMaxLifetime(0)
	db := &DB{path: path, opts: opts, writer: w, readers: r, ckptDB: c, ckpt: newCheckpointer(c), keys: newKeyCache()}
	var seqs seqSource = localSeqs{seq.NewLocal()}
	if opts.Redis != nil {
		seqs = newRedisSeqs(seq.NewRedisAllocator(opts.Redis, opts.RedisPrefix, txBounds{}, opts.RedisAlloc))
	}
	mem, err := loadMemLevel(ctx, w)
	var filter *keyFilter
	if err == nil {
		// Before anything can move a key to the file (the writer takes
		// no job until Open returns or the jobs below start).
		filter, err = loadFilter(ctx, w, mem.mark, mem.seen)
	}
	if err != nil {
		db.ckpt.close()
		return nil, errors.Join(fmt.Errorf("open %s: reading the dedup keys: %w", path, err), r.Close(), c.Close(), w.Close())
	}
	if db.w, err = newWriter(ctx, w, seqs, db.keys, mem, db.ckpt, opts); err != nil {
		db.ckpt.close()
		return nil, errors.Join(err, r.Close(), c.Close(), w.Close())
	}
	if filter != nil {
		db.w.filters.ready.Store(filter)
	}
	db.links = &linker{}
	db.w.links = db.links
	db.startRetention()
	db.startCompactor()
	if err := db.startBackfill(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("search index: %w", err)
	}
	return db, nil
}

// testPragmas are added to every connection's pragmas: tests set
// max_page_count to see a full disk.
var testPragmas []string

// Close stops the writer after the queued jobs and closes the database.
// The WAL is checkpointed and truncated last: its old frames may still hold
// the bytes of erased messages. Closing again returns the first Close's
// error.
func (db *DB) Close() error {
	db.closeOnce.Do(func() {
		if db.retention != nil {
			db.retention.Stop()
		}
		if db.backfill != nil {
			db.backfill.close()
		}
		if db.compactor != nil {
			db.compactor.close()
		}
		db.w.close()
		db.ckpt.close()
		rerr := db.readers.Close()
		cerr := db.ckptDB.Close()
		_, terr := db.writer.ExecContext(context.Background(), `PRAGMA wal_checkpoint(TRUNCATE)`)
		db.closeErr = errors.Join(rerr, cerr, terr, db.writer.Close())
	})
	return db.closeErr
}

// Ping checks that the database answers and that writes succeed (for
// /healthz): a server that can read but not write cannot take messages.
func (db *DB) Ping(ctx context.Context) error {
	if err := db.w.health.Err(); err != nil {
		return err
	}
	return db.readers.PingContext(ctx)
}

func isUnique(err error) bool {
	var e *sqlite.Error
	return errors.As(err, &e) && (e.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || e.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY)
}

func nowMS() int64 { return time.Now().UnixMilli() }

// queryRower is what *sql.DB and *sql.Tx share for single-row reads.
type queryRower interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}
