package postgres

import (
	"context"

	"github.com/imserver/imserver/chat"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// wtx is the writer's transaction with the state one batch shares.
//
// Statements whose results nothing waits for (the writes of messages, the
// markers, the counter, COMMIT) are queued and sent in one pipeline with
// the next statement that must be answered. A batch of messages alone
// takes two round trips: BEGIN and the reads, the conversations' rows
// locked; then the writes, the counter and COMMIT (writer.go).
type wtx struct {
	w       *writer
	conn    *pgx.Conn
	ctx     context.Context
	pending *pgx.Batch

	// lockLast: the counter is taken in the last pipeline (a batch of
	// messages alone); else it is locked from the start and version and
	// versionEnd hold its values.
	lockLast   bool
	version    int64 // last version handed out
	versionEnd int64 // value of the counter row at the start

	convs     map[string]*convTx      // conversations locked for messages
	touched   []*convTx               // conversations appended to, in commit order
	senders   map[[2]string]*senderTx // (conv, sender) pairs that sent
	committed []chat.Message          // appended, in order
	freed     []string                // file contents no row names any more
}

// convTx is what one transaction did with one conversation.
type convTx struct {
	id     string
	kind   string
	next   int64 // next seq from the row (rowSeqs)
	max    int64 // largest seq appended, 0 for none
	stored int64 // max as last written to conversations.max_seq
	// rosterV is the count of member changes, read with the row's lock
	// (chat.Message.RosterV).
	rosterV int64
}

// senderTx is one (conversation, sender) pair of a transaction.
type senderTx struct {
	conv, user string
	checked    bool
	member     bool
	// own counts the sender's texts not yet added to its own_unread
	// (finishMessages); SetRead and ClearHistory zero it (ownCounted).
	own int64
}

// ownCounted forgets the texts of user in conv not yet added to its
// own_unread: a statement has just set own_unread from the rows, which
// this transaction's include.
func (t *wtx) ownCounted(conv, user string) {
	if s := t.senders[[2]string{conv, user}]; s != nil {
		s.own = 0
	}
}

// nextVersion hands out the next version. The counter row is locked since
// the start of the transaction and written once at its end.
func (t *wtx) nextVersion() (int64, error) {
	t.version++
	return t.version, nil
}

// queue adds a statement to the pipeline; its error, if any, comes with
// the next flush.
func (t *wtx) queue(sql string, args ...any) *pgx.QueuedQuery {
	return t.pending.Queue(sql, args...)
}

// flush sends what is queued and reads every answer, running the queued
// queries' callbacks; it returns the first error.
func (t *wtx) flush() error {
	if t.pending.Len() == 0 {
		return nil
	}
	b := t.pending
	t.pending = &pgx.Batch{}
	return t.conn.SendBatch(t.ctx, b).Close()
}

// Exec runs a statement in the transaction, in one round trip with what
// is queued (a job's SAVEPOINT): function jobs run under the counter's
// lock, which every other writer of the cluster may be waiting for.
func (t *wtx) Exec(sql string, args ...any) (pgconn.CommandTag, error) {
	var tag pgconn.CommandTag
	t.queue(sql, args...).Exec(func(ct pgconn.CommandTag) error {
		tag = ct
		return nil
	})
	err := t.flush()
	return tag, err
}

// QueryRow runs a query for one row in the transaction, after what is
// queued.
func (t *wtx) QueryRow(sql string, args ...any) pgx.Row {
	if err := t.flush(); err != nil {
		return errRow{err}
	}
	return t.conn.QueryRow(t.ctx, sql, args...)
}

// Query runs a query in the transaction, after what is queued.
func (t *wtx) Query(sql string, args ...any) (pgx.Rows, error) {
	if err := t.flush(); err != nil {
		return nil, err
	}
	return t.conn.Query(t.ctx, sql, args...)
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
