package storage

import (
	"context"
	"database/sql"
	"log/slog"
	"sync"
	"sync/atomic"
)

// checkpointer copies the WAL back into the database file on a connection
// of its own, so that the writer does not. With SQLite's automatic
// checkpoint, the commit that took the WAL past 1000 pages also read them
// back, wrote them to the database file and fsynced it, all while holding
// the write lock with the next batch waiting: a tenth of the writer's CPU
// time, plus the wait for that fsync. A PASSIVE checkpoint takes no write
// lock and runs beside the writer's transactions (on another core).
//
// Two things it cannot do alone, for which the writer checkpoints itself
// between two transactions (tail):
//   - Rewind the WAL. SQLite starts it over only when a write transaction
//     begins while every frame is in the database file, which seldom
//     happens while the writer commits back to back. Once a checkpoint
//     finds the WAL past restartPages, the writer copies the short tail
//     and its next transaction rewinds the WAL.
//   - Keep up. If the writer outruns the checkpoints (a slow disk), it
//     waits for the one under way and copies the rest itself once
//     maxPendingPages were written since the last one began: the WAL stays
//     bounded, as with SQLite's own checkpoints.
//
// Like SQLite's own checkpoints, these wait for no reader: a reader that
// keeps an old snapshot only delays the rewind.
type checkpointer struct {
	db *sql.DB
	// The thresholds, in pages (see the constants of the same names).
	checkpointPages, restartPages, maxPendingPages int64

	mu      sync.Mutex    // held while a checkpoint of this process runs
	pending atomic.Int64  // pages written to the WAL since the last checkpoint began
	restart atomic.Bool   // the WAL is long: the writer should copy the tail
	kick    chan struct{} // pending reached checkpointPages
	quit    chan struct{}
	done    chan struct{}
}

const (
	// checkpointPages is how many pages the writer writes to the WAL
	// between two checkpoints: 4 times SQLite's default, because the
	// pages that every batch rewrites (the tail of each conversation, its
	// row, its senders' rows) are copied once per checkpoint, however many
	// commits wrote them.
	checkpointPages = 4000
	// restartPages is the WAL length (about 32 MiB with 4 KiB pages) past
	// which the writer rewinds it. What is written while the checkpoints
	// run comes on top: under a sustained load the WAL file grows to about
	// twice that, then stays.
	restartPages = 8000
	// maxPendingPages is how far the writer may run ahead of the
	// checkpoints.
	maxPendingPages = 2 * checkpointPages
)

// newCheckpointer starts a checkpointer on db, a connection that never
// writes rows. The writer's connection must run with wal_autocheckpoint=0.
func newCheckpointer(db *sql.DB) *checkpointer {
	c := &checkpointer{
		db:              db,
		checkpointPages: checkpointPages,
		restartPages:    restartPages,
		maxPendingPages: maxPendingPages,
		kick:            make(chan struct{}, 1),
		quit:            make(chan struct{}),
		done:            make(chan struct{}),
	}
	go c.loop()
	return c
}

// committed tells the checkpointer that a commit wrote pages to the WAL.
// It never blocks. It reports whether the writer should now checkpoint
// itself (tail).
func (c *checkpointer) committed(pages int) bool {
	n := c.pending.Add(int64(pages))
	if n >= c.checkpointPages {
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
	return n >= c.maxPendingPages || c.restart.Load()
}

// tail runs checkpoint, the writer's own, after the checkpoint under way.
func (c *checkpointer) tail(checkpoint func() error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending.Store(0)
	c.restart.Store(false)
	if err := checkpoint(); err != nil {
		slog.Warn("wal checkpoint", "err", err)
	}
}

func (c *checkpointer) loop() {
	defer close(c.done)
	for {
		select {
		case <-c.kick:
		case <-c.quit:
			return
		}
		log, err := c.checkpoint()
		if err == nil && log >= c.restartPages {
			// Copy what was written meanwhile too, so that the tail left
			// to the writer is short.
			if _, err = c.checkpoint(); err == nil {
				c.restart.Store(true)
			}
		}
		if err != nil {
			slog.Warn("wal checkpoint", "err", err)
		}
	}
}

// checkpoint runs one checkpoint and returns the frames in the WAL.
func (c *checkpointer) checkpoint() (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending.Store(0)
	log, _, err := checkpointed(c.db.QueryRowContext(context.Background(), checkpointSQL))
	return log, err
}

func (c *checkpointer) close() {
	close(c.quit)
	<-c.done
}

// checkpointSQL copies what it can of the WAL into the database file
// without waiting for anyone; its row is (busy, WAL frames, frames copied).
const checkpointSQL = `PRAGMA wal_checkpoint(PASSIVE)`

// checkpointed reads the row of checkpointSQL: the frames in the WAL and
// how many of them are now in the database file.
func checkpointed(row interface{ Scan(...any) error }) (log, done int64, err error) {
	var busy int
	err = row.Scan(&busy, &log, &done)
	return log, done, err
}
