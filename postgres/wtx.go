package postgres

import (
	"context"

	"github.com/imserver/imserver/chat"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// wtx is the writer's transaction with the state one batch shares.
type wtx struct {
	w   *writer
	tx  pgx.Tx
	ctx context.Context

	version    int64 // last version handed out
	versionEnd int64 // value of the counter row at the start

	convs     map[string]*convTx      // conversations locked for messages
	touched   []*convTx               // conversations appended to, in commit order
	senders   map[[2]string]*senderTx // (conv, sender) pairs that sent
	committed []chat.Message          // appended, in order
}

// convTx is what one transaction did with one conversation.
type convTx struct {
	id     string
	kind   string
	next   int64 // next seq from the row (rowSeqs)
	max    int64 // largest seq appended, 0 for none
	stored int64 // max as last written to conversations.max_seq
}

// senderTx is one (conversation, sender) pair of a transaction.
type senderTx struct {
	conv, user string
	checked    bool
	member     bool
	max        int64
}

// nextVersion hands out the next version. The counter row is locked since
// the start of the transaction and written once at its end.
func (t *wtx) nextVersion() (int64, error) {
	t.version++
	return t.version, nil
}

// Exec runs a statement in the transaction.
func (t *wtx) Exec(sql string, args ...any) (pgconn.CommandTag, error) {
	return t.tx.Exec(t.ctx, sql, args...)
}

// QueryRow runs a query for one row in the transaction.
func (t *wtx) QueryRow(sql string, args ...any) pgx.Row {
	return t.tx.QueryRow(t.ctx, sql, args...)
}

// Query runs a query in the transaction.
func (t *wtx) Query(sql string, args ...any) (pgx.Rows, error) {
	return t.tx.Query(t.ctx, sql, args...)
}
