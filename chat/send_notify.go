package chat

import "context"

// NotifyAppender is a MessageStore that can call back with a message's
// outcome instead of being waited for (see SubmitNotify).
type NotifyAppender interface {
	// AppendNotify queues m like Append and calls done once with what
	// Append's Pending would return; the error says why m was not queued
	// (done is then not called).
	AppendNotify(ctx context.Context, m Message, done func(Message, bool, error)) error
}

// Gatherer is a Deliverer that can hold the sessions' writers while a
// commit's deliveries and the answers to its senders are queued, and wake
// each once at the end: a session then gets its `sent` and the messages of
// the same commit in one write.
type Gatherer interface {
	Gather(fn func())
}

// SubmitNotify is Submit for callers that would rather be called than
// wait: done gets the outcome (as Pending would return it) once, either
// before SubmitNotify returns (refused, or a known retry) or later, from
// the goroutine that answers the store's commits (never block in it).
// Outcomes of one caller's submissions come in submission order only as
// far as the store keeps it: a refusal is answered at once.
func (s *Service) SubmitNotify(ctx context.Context, from string, req SendRequest, done func(Message, bool, error)) {
	na, ok := s.store.(NotifyAppender)
	if !ok {
		wait := s.Submit(ctx, from, req)
		go func() { done(wait()) }()
		return
	}
	msg, known, err := s.prepareSend(ctx, from, req)
	if err != nil {
		done(Message{}, false, err)
		return
	}
	if known != nil {
		done(*known, true, nil)
		return
	}
	err = na.AppendNotify(ctx, msg, func(m Message, dup bool, err error) {
		if err != nil {
			done(Message{}, false, err)
			return
		}
		done(s.stored(m), dup, nil)
	})
	if err != nil {
		done(Message{}, false, err)
	}
}

// commit is one batch from the store's commit hook: the messages it
// stored and, for CommittedThen, the function that answers its senders.
type commit struct {
	msgs   []Message
	answer func()
}

// CommittedThen is Committed for a store that answers its senders through
// the hook (storage's OnBatch): answer runs right after the messages are
// handed to the deliverer, inside one Gather when the deliverer gathers.
// msgs may be empty (a failed batch still has senders to answer).
func (s *Service) CommittedThen(msgs []Message, answer func()) {
	s.maxSeqs.advance(msgs)
	s.commits <- commit{msgs: msgs, answer: answer}
}

// handleCommit fans a commit out and answers its senders.
func (s *Service) handleCommit(ctx context.Context, c commit) {
	run := func() {
		if len(c.msgs) > 0 {
			s.fanOut(ctx, c.msgs)
		}
		if c.answer != nil {
			c.answer()
		}
	}
	if g, ok := s.deliver.(Gatherer); ok && c.answer != nil {
		g.Gather(run)
		return
	}
	run()
}
