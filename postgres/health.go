package postgres

import (
	"errors"
	"io"
	"net"

	"github.com/imserver/imserver/chat"
	"github.com/imserver/imserver/internal/writehealth"
	"github.com/jackc/pgx/v5/pgconn"
)

// failureKind names the condition of the database server a failed write
// met (writehealth's kinds), or "" for a failure of that write alone (a
// deadlock, a serialization conflict, a batch that ran out of time behind
// other nodes' row locks, a bug), which says nothing about the next one and
// is not reported by /healthz. (A server that hangs is: Ping's own check
// times out.)
func failureKind(err error) string {
	if err == nil {
		return ""
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "53100": // disk_full
			return writehealth.Full
		case pe.Code == "25006": // read_only_sql_transaction: a standby, or read-only by setting
			return writehealth.ReadOnly
		case pe.Code == "58030": // io_error
			return writehealth.IO
		case pe.Code[:2] == "08", pe.Code[:2] == "53", pe.Code[:2] == "57", pe.Code == "25P03":
			// Connection lost, out of memory or connections, shutting
			// down, the session ended for idling in a transaction.
			return writehealth.Unreachable
		}
		return ""
	}
	var ne net.Error
	if isConnError(err) || (errors.As(err, &ne) && !ne.Timeout()) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return writehealth.Unreachable
	}
	return ""
}

// WriteHealth implements chat.Store: nil while writes commit, else the
// unavailable error writes are answered with.
func (db *DB) WriteHealth() error {
	if err := db.w.health.Err(); err != nil {
		return chat.Errorf(chat.EUnavailable, "the database cannot be written; retry later")
	}
	return nil
}
