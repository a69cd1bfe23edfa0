package storage

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/imserver/imserver/chat"
	"modernc.org/sqlite"
)

// The writer is the only user of its connection, so it talks to the
// SQLite driver directly (sql.Conn.Raw): database/sql's per-call locking,
// context plumbing, argument conversion and allocations cost about 1 µs
// per statement, a sixth of an insert, and a batch runs one statement per
// message and a few per conversation. Statements are prepared once per
// connection rather than once per transaction. wtx gives the jobs the
// small API of *sql.Tx they use.

// driverConn is what the writer needs of the SQLite driver's connection;
// DBStatus tells the checkpointer how many pages each commit wrote.
type driverConn interface {
	driver.ExecerContext
	driver.QueryerContext
	driver.ConnPrepareContext
	sqlite.DBStatus
}

// wtx is the writer's transaction with the state one batch shares.
type wtx struct {
	w   *writer
	dc  driverConn
	ctx context.Context

	version int64            // last version handed out, 0 until first use
	fts     map[int64]*ftsOp // the search index's pending writes (applyFTS)
	// pending is search_backfill.pending as read in this transaction
	// (pendingRead): docs at or below it are the background job's.
	pending     int64
	pendingRead bool
	versionEnd  int64 // value in the counters row at the start

	convs     map[string]*convTx      // conversations messages were queued for
	touched   []*convTx               // conversations appended to, in commit order
	senders   map[[2]string]*senderTx // (conv, sender) pairs that sent
	committed []chat.Message          // appended, in order
	live      liveTx                  // what the transaction does to the live set (live.go)
	freed     []string                // file contents whose last row was deleted
	keys      map[string]int64        // keys made or read, not yet committed (keys.go)
	// memberReads are the senders whose member rows were read, for the
	// writer's memory once the transaction commits (member_rows.go).
	memberReads []*senderTx
	memTx       memTx // changes to the dedup level in memory (dedup_mem.go)
}

// convTx is what one transaction did with one conversation.
type convTx struct {
	id       string
	key      int64    // integer key, set with its senders' (writer.reserve)
	n        int64    // messages of the current round
	r        seqRange // the current round's reservation
	reserved bool     // seqs were reserved: a rollback must tell the allocator
	max      int64    // largest seq appended, 0 for none
	stored   int64    // max as last written to conversations.max_seq
	kindName string   // direct or group, read when a mutation needs it
	muts     int64    // count of mutations so far (muts.go), once mutsRead
	mutsRead bool
}

// senderTx is one (conversation, sender) pair of a transaction.
type senderTx struct {
	conv, user string
	checked    bool // membership was read in this transaction
	member     bool // may send
	// own counts the sender's text messages appended and not yet added to
	// its row's own_unread (finishMessages); SetRead and ClearHistory,
	// which set own_unread from the rows, zero it.
	own int64
	// memberRow is set when membership is read (or remembered,
	// member_rows.go).
	memberRow
}

// ownCounted forgets the texts of user in conv not yet added to its
// own_unread: a statement has just set own_unread from the rows, which
// this transaction's include.
func (t *wtx) ownCounted(conv, user string) {
	if s := t.senders[[2]string{conv, user}]; s != nil {
		s.own = 0
	}
}

// nextVersion hands out the next value of the global version counter.
func (t *wtx) nextVersion() (int64, error) {
	if t.version == 0 {
		st, err := t.stmt(`SELECT value FROM counters WHERE name = 'version'`)
		if err != nil {
			return 0, err
		}
		if err := st.QueryRowContext(t.ctx).Scan(&t.versionEnd); err != nil {
			return 0, err
		}
		t.version = t.versionEnd
	}
	t.version++
	return t.version, nil
}

// ExecContext runs a statement that returns no rows.
func (t *wtx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	nv, err := namedValues(args)
	if err != nil {
		return nil, err
	}
	return t.dc.ExecContext(ctx, query, nv)
}

// QueryContext runs a query. Close the rows when done: they hold the
// statement.
func (t *wtx) QueryContext(ctx context.Context, query string, args ...any) (*wrows, error) {
	nv, err := namedValues(args)
	if err != nil {
		return nil, err
	}
	r, err := t.dc.QueryContext(ctx, query, nv)
	if err != nil {
		return nil, err
	}
	return newRows(r), nil
}

// QueryRowContext runs a query for at most one row.
func (t *wtx) QueryRowContext(ctx context.Context, query string, args ...any) *wrow {
	r, err := t.QueryContext(ctx, query, args...)
	return &wrow{rows: r, err: err}
}

// stmt returns query prepared on the writer's connection. Statements are
// kept for the connection's life, so query must be a constant.
func (t *wtx) stmt(query string) (*wstmt, error) {
	return t.w.stmt(t.dc, query)
}

// stmt is wtx.stmt.
func (w *writer) stmt(dc driverConn, query string) (*wstmt, error) {
	if s, ok := w.stmts[query]; ok {
		return s, nil
	}
	ds, err := dc.PrepareContext(context.Background(), query)
	if err != nil {
		return nil, err
	}
	se, ok1 := ds.(driver.StmtExecContext)
	sq, ok2 := ds.(driver.StmtQueryContext)
	if !ok1 || !ok2 {
		ds.Close()
		return nil, fmt.Errorf("storage: the sqlite driver's statements lack ExecContext or QueryContext")
	}
	s := &wstmt{ds: ds, exec: se, query: sq}
	w.stmts[query] = s
	return s, nil
}

// wstmt is a statement prepared on the writer's connection.
type wstmt struct {
	ds    driver.Stmt
	exec  driver.StmtExecContext
	query driver.StmtQueryContext
}

// ExecContext runs the statement with args.
func (s *wstmt) ExecContext(ctx context.Context, args ...any) (sql.Result, error) {
	nv, err := namedValues(args)
	if err != nil {
		return nil, err
	}
	return s.exec.ExecContext(ctx, nv)
}

// QueryContext runs the statement. Close the rows when done.
func (s *wstmt) QueryContext(ctx context.Context, args ...any) (*wrows, error) {
	nv, err := namedValues(args)
	if err != nil {
		return nil, err
	}
	r, err := s.query.QueryContext(ctx, nv)
	if err != nil {
		return nil, err
	}
	return newRows(r), nil
}

// QueryRowContext runs the statement for at most one row.
func (s *wstmt) QueryRowContext(ctx context.Context, args ...any) *wrow {
	nv, err := namedValues(args)
	if err != nil {
		return &wrow{err: err}
	}
	r, err := s.query.QueryContext(ctx, nv)
	if err != nil {
		return &wrow{err: err}
	}
	return &wrow{rows: newRows(r)}
}

// namedValues converts arguments the way database/sql does for the types
// the storage passes (ints, strings, byte slices, nil, and Valuers).
func namedValues(args []any) ([]driver.NamedValue, error) {
	if len(args) == 0 {
		return nil, nil
	}
	nv := make([]driver.NamedValue, len(args))
	for i, a := range args {
		nv[i].Ordinal = i + 1
		switch v := a.(type) {
		case nil, int64, float64, bool, []byte, string, time.Time:
			nv[i].Value = v
		case int:
			nv[i].Value = int64(v)
		default:
			c, err := driver.DefaultParameterConverter.ConvertValue(a)
			if err != nil {
				return nil, fmt.Errorf("storage: argument %d: %w", i+1, err)
			}
			nv[i].Value = c
		}
	}
	return nv, nil
}

// wrows iterates over the rows of a query, like *sql.Rows.
type wrows struct {
	r    driver.Rows
	vals []driver.Value
	err  error
	done bool
}

func newRows(r driver.Rows) *wrows {
	return &wrows{r: r, vals: make([]driver.Value, len(r.Columns()))}
}

// Next moves to the next row; false at the end or on an error (see Err).
func (r *wrows) Next() bool {
	if r.done {
		return false
	}
	if err := r.r.Next(r.vals); err != nil {
		if !errors.Is(err, io.EOF) {
			r.err = err
		}
		r.Close()
		return false
	}
	return true
}

// Scan copies the current row into dest.
func (r *wrows) Scan(dest ...any) error {
	if len(dest) != len(r.vals) {
		return fmt.Errorf("storage: scan: %d destinations for %d columns", len(dest), len(r.vals))
	}
	for i, v := range r.vals {
		if err := assign(dest[i], v); err != nil {
			return fmt.Errorf("storage: scan column %d: %w", i, err)
		}
	}
	return nil
}

// Err is the error that ended the iteration, if any.
func (r *wrows) Err() error { return r.err }

// Close ends the query; the statement is reset for its next use.
func (r *wrows) Close() error {
	if r.done {
		return nil
	}
	r.done = true
	if err := r.r.Close(); err != nil && r.err == nil {
		r.err = err
	}
	return r.err
}

// wrow is the result of QueryRowContext, like *sql.Row.
type wrow struct {
	rows *wrows
	err  error
}

// Scan copies the first row into dest and closes the query; sql.ErrNoRows
// when there is none.
func (r *wrow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	return r.rows.Close()
}

// assign stores a value from the driver in dest. It takes the pointer
// types the storage scans into and any sql.Scanner, and converts as
// database/sql does (through sql.Null, which uses its conversions).
func assign(dest any, v driver.Value) error {
	switch d := dest.(type) {
	case sql.Scanner:
		return d.Scan(v)
	case *string:
		return assignNull(d, v)
	case *int64:
		return assignNull(d, v)
	case *int:
		return assignNull(d, v)
	case *float64:
		return assignNull(d, v)
	case *bool:
		return assignNull(d, v)
	case *[]byte:
		switch b := v.(type) {
		case nil:
			*d = nil
		case []byte:
			*d = append([]byte(nil), b...) // the driver may reuse b
		default:
			return assignNull(d, v)
		}
		return nil
	case *any:
		if b, ok := v.([]byte); ok {
			v = append([]byte(nil), b...)
		}
		*d = v
		return nil
	}
	return fmt.Errorf("unsupported destination %T", dest)
}

func assignNull[T any](d *T, v driver.Value) error {
	var n sql.Null[T]
	if err := n.Scan(v); err != nil {
		return err
	}
	if !n.Valid {
		return fmt.Errorf("converting NULL to %T is unsupported", *d)
	}
	*d = n.V
	return nil
}
