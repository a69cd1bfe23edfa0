package storage

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"

	"github.com/imserver/imserver/chat"
)

// Pipelined sync: with synchronous FULL, SQLite fsyncs the WAL inside
// COMMIT, on the writer's goroutine, and nothing else can use the write
// connection meanwhile: every batch waited for the previous one's fsync,
// and the senders of the next batch waited for both. Instead the writer's
// connection runs with synchronous NORMAL (its COMMIT appends the batch's
// frames to the WAL without an fsync; SQLite stays consistent in that mode,
// only durability is left to us) and the syncer fsyncs the WAL file on its
// own goroutine. The writer goes on with the next batch at once; the
// syncer answers a batch's jobs and hands its messages to the commit hook
// only after an fsync that began after the batch's COMMIT returned, so
// nothing is acknowledged or delivered before it is durable. One fsync
// covers every batch committed before it began (group fsync), and batches
// are answered in commit order.
//
// Readers of the database can see a batch before its fsync ends (SQLite
// makes a commit visible when its frames are written); only a power loss
// in that window, not a crash of the process, would take back what they
// saw, as with synchronous NORMAL.
type syncer struct {
	wal   *os.File // the WAL, opened once: its inode stays while the writer's connection is open
	hook  func(jobs []*job, committed []chat.Message)
	fsync func() error      // wal.Sync; tests hold it up
	fail  func(error) error // records a failed fsync, returns the error to answer

	mu      sync.Mutex
	queue   []syncBatch
	syncing bool // an fsync runs
	closing bool
	wake    chan struct{}
	done    chan struct{}
	synced  chan struct{} // a token after each fsync, for the writer
}

// syncBatch is a committed batch waiting for its fsync.
type syncBatch struct {
	jobs      []*job
	committed []chat.Message
}

func openSyncer(walPath string, hook func([]*job, []chat.Message), fail func(error) error) (*syncer, error) {
	f, err := os.OpenFile(walPath, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("storage: opening the WAL to sync it: %w", err)
	}
	// What was written before (the migrations) is made durable now.
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, fmt.Errorf("storage: syncing the WAL: %w", err)
	}
	s := &syncer{wal: f, hook: hook, fsync: f.Sync, fail: fail, wake: make(chan struct{}, 1), done: make(chan struct{}), synced: make(chan struct{}, 1)}
	go s.loop()
	return s, nil
}

// add queues a batch whose COMMIT returned. It never waits for the disk.
// The jobs are copied: the writer reuses its batch slice.
func (s *syncer) add(jobs []*job, committed []chat.Message) {
	s.mu.Lock()
	s.queue = append(s.queue, syncBatch{jobs: slices.Clone(jobs), committed: committed})
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *syncer) loop() {
	defer close(s.done)
	for {
		<-s.wake
		s.mu.Lock()
		q := s.queue
		s.queue = nil
		s.syncing = len(q) > 0
		closing := s.closing
		s.mu.Unlock()
		if len(q) > 0 {
			err := s.fsync()
			s.mu.Lock()
			s.syncing = false
			s.mu.Unlock()
			select {
			case s.synced <- struct{}{}:
			default:
			}
			for _, b := range q {
				if err != nil {
					// The commit may not be on disk: its senders are told
					// it failed (a retry finds the message if it is there)
					// and it is not delivered.
					ferr := s.fail(err)
					for _, j := range b.jobs {
						j.r = result{err: ferr}
					}
					b.committed = nil
				}
				s.hook(b.jobs, b.committed)
			}
		}
		if closing {
			s.mu.Lock()
			left := len(s.queue)
			s.mu.Unlock()
			if left == 0 {
				return
			}
		}
	}
}

// busy reports whether a committed batch waits for its fsync.
func (s *syncer) busy() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.syncing || len(s.queue) > 0
}

// moreWhileSyncing adds the jobs queued meanwhile to batch, like more; and
// while the previous batch's fsync runs and nothing new is queued, it
// waits for either, so that the open transaction takes in whatever arrives
// during the fsync instead of committing (and syncing) a batch of its own:
// the inserts of the next batch overlap the fsync, batches stay as large
// as without the syncer, and so do the pages written per message.
func (w *writer) moreWhileSyncing(batch []*job) []*job {
	batch = w.queue.More(batch)
	if w.sync == nil {
		return batch
	}
	for n := len(batch); len(batch) == n && n < w.opts.BatchSize && w.sync.busy(); {
		select {
		case j := <-w.queue.Jobs():
			batch = append(batch, j)
		case <-w.sync.synced:
		}
	}
	return batch
}

// close answers what is queued and stops the syncer; the writer calls it
// once it commits no more.
func (s *syncer) close() {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	<-s.done
	s.wal.Close()
}

// durable hands a committed batch on: answered now when SQLite synced it
// in COMMIT, else after the syncer's fsync.
func (w *writer) durable(batch []*job, committed []chat.Message) {
	if w.sync == nil {
		w.answer(batch, committed)
		return
	}
	w.sync.add(batch, committed)
}

// syncFailed records a failed fsync of the WAL in the storage health (a
// failing disk is reported as the writer's own failures are) and returns
// the error its batch's jobs get.
func (w *writer) syncFailed(err error) error {
	if kind := failureKind(err); kind != "" {
		w.failed(kind, err)
		return unavailable(err)
	}
	return fmt.Errorf("write batch: syncing the WAL: %w", err)
}

// startSyncer switches the writer's connection to synchronous NORMAL and
// starts the syncer, when FULL is asked for and the WAL file can be opened
// (else COMMIT keeps syncing, as SQLite does).
func (w *writer) startSyncer(ctx context.Context) error {
	if w.opts.Synchronous != "FULL" || !w.opts.PipelinedSync || w.opts.walPath == "" {
		return nil
	}
	if _, err := os.Stat(w.opts.walPath); err != nil {
		return nil // no WAL file of its own (not expected): SQLite syncs
	}
	s, err := openSyncer(w.opts.walPath, w.answer, w.syncFailed)
	if err != nil {
		return err
	}
	if _, err := w.conn.ExecContext(ctx, "PRAGMA synchronous = NORMAL"); err != nil {
		s.close()
		return err
	}
	w.sync = s
	return nil
}
