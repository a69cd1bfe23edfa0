package storage

import (
	"context"

	"github.com/imserver/imserver/chat"
)

// A job may be answered by a call instead of a channel: the WebSocket
// session that sent it then needs no goroutine waiting for each send, and
// with Options.OnBatch the answers of a batch run beside its fan-out on
// the commit hook's goroutine instead of on the writer's, so that a
// session's `sent` and the messages it gets from the same commit leave in
// one write, and the writer goes on to the next batch at once.

// AppendNotify queues m like Append and calls done with the outcome once
// it is known: after the commit made m durable, or the failure. done runs
// on the writer's goroutine, or where Options.OnBatch runs answers; it must
// not block. The error says why m was not queued (done is then not called).
func (db *DB) AppendNotify(ctx context.Context, m chat.Message, done func(chat.Message, bool, error)) error {
	return db.w.enqueue(ctx, &job{msg: m, notify: done})
}

// answer hands a finished batch its results: jobs with channels at once,
// jobs with notify functions after (or, with OnBatch, together with) the
// commit hook. committed is nil when the batch failed.
func (w *writer) answer(batch []*job, committed []chat.Message) {
	// The jobs to notify are kept by pointer: the writer reuses batch's
	// slice, but a job is answered once and never reused, so its result
	// stays as it is until run reads it (a copy of each result, a whole
	// message, was most of what a batch allocated).
	var notes []*job
	for _, j := range batch {
		if j.notify != nil {
			if notes == nil {
				notes = make([]*job, 0, len(batch))
			}
			notes = append(notes, j)
		} else {
			j.res <- j.r
		}
		j.conv, j.sender = nil, nil
	}
	run := func() {
		for _, j := range notes {
			j.notify(j.r.msg, j.r.dup, j.r.err)
		}
	}
	if w.opts.OnBatch != nil {
		if len(committed) > 0 || len(notes) > 0 { // not for a batch of function jobs
			w.opts.OnBatch(committed, run)
		}
		return
	}
	if len(committed) > 0 {
		w.opts.OnCommit(committed)
	}
	run()
}
