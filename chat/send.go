package chat

import (
	"context"
	"time"
	"unicode/utf8"
)

const maxClientMsgIDLen = 128

// SendRequest is a message as a client sends it.
type SendRequest struct {
	Conv        string
	ClientMsgID string
	Body        string
	Kind        string
	// v1.1: the message a mutation changes, a reaction's emoji and
	// direction, the message a text answers.
	Target  int64
	Emoji   string
	On      *bool
	ReplyTo int64
	// Attachments are ids of files the sender uploaded.
	Attachments []string
	// Origin is the sending session; empty for HTTP.
	Origin string

	// refused is set by checkSend when the send may only be a retry
	// (Message.RetryOnly).
	refused *Error
}

// Send stores a message and returns it once durable; duplicate is true when
// the same client_msg_id was stored before, and then the first message is
// returned unchanged.
func (s *Service) Send(ctx context.Context, from string, req SendRequest) (Message, bool, error) {
	return s.Submit(ctx, from, req)()
}

func failed(err error) Pending {
	return func() (Message, bool, error) { return Message{}, false, err }
}

// Submit checks and queues a message and returns at once; the Pending it
// returns waits for the outcome. Messages submitted one after another by
// one caller are stored in that order.
func (s *Service) Submit(ctx context.Context, from string, req SendRequest) Pending {
	msg, known, err := s.prepareSend(ctx, from, req)
	if err != nil {
		return failed(err)
	}
	if known != nil {
		return func() (Message, bool, error) { return *known, true, nil }
	}
	wait := s.store.Append(ctx, msg)
	return func() (Message, bool, error) {
		m, dup, err := wait()
		if err != nil {
			return Message{}, false, err
		}
		return s.stored(m), dup, nil
	}
}

// prepareSend checks a send and returns the message to append, or the
// message stored earlier when the send is a known retry.
func (s *Service) prepareSend(ctx context.Context, from string, req SendRequest) (Message, *Message, error) {
	m, r, err := s.checkSend(ctx, from, &req)
	if err != nil || m != nil {
		return Message{}, m, err
	}
	if r != nil && req.refused == nil { // else the store decides (checkSend)
		s.recordStorm(ctx, req.Conv)
	}
	msg := Message{
		Conv:        req.Conv,
		From:        from,
		ClientMsgID: req.ClientMsgID,
		Kind:        req.Kind,
		Body:        req.Body,
		Attachments: attachmentIDs(req.Attachments),
		Target:      req.Target,
		Emoji:       req.Emoji,
		On:          req.On,
		ReplyTo:     req.ReplyTo,
		Origin:      req.Origin,
		RetryOnly:   req.refused,
	}
	if r != nil && req.refused == nil && (req.Kind == KindText || req.Kind == KindEdit) {
		msg.Mentions = mentions(r, from, req.Body)
	}
	return msg, nil, nil
}

// stored is a message as the store returned it, as its sender is answered.
func (s *Service) stored(m Message) Message {
	s.dedup.add(m)
	m.Origin = ""
	return m
}

// checkSend validates a send; it returns the stored message when the send is a
// known retry, and the conversation's roster (nil when the sender is not a
// member now and only the store can tell a retry).
func (s *Service) checkSend(ctx context.Context, from string, req *SendRequest) (*Message, *cachedRoster, error) {
	if req.Conv == "" {
		return nil, nil, Errorf(EBadRequest, "conv is required")
	}
	if n := len(req.ClientMsgID); n == 0 || utf8.RuneCountInString(req.ClientMsgID) > maxClientMsgIDLen {
		return nil, nil, Errorf(EBadRequest, "client_msg_id must be 1-%d characters", maxClientMsgIDLen)
	}
	if req.Kind == "" {
		req.Kind = KindText
	}
	if err := checkKind(req); err != nil {
		return nil, nil, err
	}
	if err := checkAttachments(req.Attachments); err != nil {
		return nil, nil, err
	}
	if len(req.Body) > s.cfg.MaxBodyBytes {
		return nil, nil, &Error{Code: ETooLarge, Message: "body is over the limit"}
	}
	if !storable(req.Body) || !storable(req.ClientMsgID) {
		return nil, nil, Errorf(EBadRequest, "body and client_msg_id must be UTF-8, without NUL")
	}
	r, err := s.member(ctx, req.Conv, from)
	if err != nil {
		// A sender kicked (or gone) since its send was stored still gets
		// the first answer to a retry, as the contract promises ("retries
		// get the first seq"): the message lies in its visible range. The
		// recent ids may know it; otherwise (after a restart, or evicted)
		// only the store does, so the send goes there with no roster: the
		// store answers the retry, or refuses the send as not_member.
		if ErrorCode(err) == ENotMember {
			if m, ok := s.retried(ctx, from, req); ok {
				return &m, nil, nil
			}
			if ok, _ := s.limits.allow(from, time.Now()); ok {
				return nil, nil, nil
			}
		}
		return nil, nil, err
	}
	// A retry is answered before the rate limit: it costs nothing and a
	// client retrying after a timeout must learn its seq.
	if m, ok := s.retried(ctx, from, req); ok {
		return &m, r, nil
	}
	now := time.Now()
	if ok, wait := s.limits.allow(from, now); !ok {
		ms := wait.Milliseconds()
		if ms < 1 {
			ms = 1
		}
		e := &Error{Code: ERateLimited, Message: "sending too fast", RetryAfterMS: ms}
		// The recent ids forget (a restart, eviction), so only the store
		// can tell a retry from a new send. It is asked, at most at the
		// send rate again: a flood over the limit costs the writer a
		// bounded number of look-ups, and stores nothing.
		if ok, _ := s.retryLookups.allow(from, now); ok {
			req.refused = e
			return nil, r, nil
		}
		return nil, nil, e
	}
	return nil, r, nil
}

// checkKind checks the fields each kind needs and takes. What depends on
// the target's state (its sender, whether it was deleted, who reacted) is
// decided by the store in the write transaction.
func checkKind(req *SendRequest) error {
	if req.ReplyTo < 0 || req.Target < 0 {
		return Errorf(EBadRequest, "reply_to and target must be seqs")
	}
	if req.Kind != KindText && req.ReplyTo != 0 {
		return Errorf(EBadRequest, "only a text message takes reply_to")
	}
	if req.Kind != KindText && len(req.Attachments) > 0 {
		return Errorf(EBadRequest, "only a text message takes attachments")
	}
	if req.Kind != KindReaction && (req.Emoji != "" || req.On != nil) {
		return Errorf(EBadRequest, "only a reaction takes emoji and on")
	}
	switch req.Kind {
	case KindText:
		if req.Body == "" && len(req.Attachments) == 0 {
			return Errorf(EBadRequest, "body is required (it may be empty only with attachments)")
		}
		if req.Target != 0 {
			return Errorf(EBadRequest, "a text message takes no target")
		}
		return nil
	case KindEdit:
		if req.Body == "" {
			return Errorf(EBadRequest, "an edit needs a body (delete the message instead)")
		}
	case KindDelete:
		if req.Body != "" {
			return Errorf(EBadRequest, "a delete takes no body")
		}
	case KindReaction:
		if req.Body != "" {
			return Errorf(EBadRequest, "a reaction takes no body")
		}
		if n := len(req.Emoji); n == 0 || n > MaxEmojiBytes || !storable(req.Emoji) {
			return Errorf(EBadRequest, "emoji must be 1-%d bytes of UTF-8, without NUL", MaxEmojiBytes)
		}
		if req.On == nil {
			return Errorf(EBadRequest, "a reaction needs on (true or false)")
		}
	default:
		return Errorf(EBadRequest, "kind must be text, edit, delete or reaction")
	}
	if req.Target == 0 {
		return Errorf(EBadRequest, "%s needs a target", req.Kind)
	}
	return nil
}

// Committed is the store's commit hook: it receives every batch of newly
// stored messages, in seq order per conversation, right after the commit.
// It queues them for fan-out and returns; the queue is bounded so that a
// stalled fan-out slows the writer instead of growing memory.
func (s *Service) Committed(msgs []Message) {
	s.maxSeqs.advance(msgs)
	s.commits <- commit{msgs: msgs}
}

// dispatch fans committed messages out to online members. One goroutine
// keeps the per-conversation order the writer committed in.
// Storm transitions and batch flushes run here too, so that a storming
// group's messages keep that order.
func (s *Service) dispatch() {
	defer s.wg.Done()
	ctx := context.Background()
	var changes <-chan stormChange
	var flush <-chan time.Time
	if s.storm != nil {
		t := time.NewTicker(s.storm.cfg.FlushInterval)
		defer t.Stop()
		changes, flush = s.storm.changes, t.C
	}
	for {
		select {
		case c := <-s.commits:
			s.handleCommit(ctx, c)
		case c := <-changes:
			s.switchStorm(ctx, c)
		case <-flush:
			s.flushStorms()
		case <-s.stop:
			for {
				select {
				case c := <-s.commits:
					s.handleCommit(ctx, c)
				default:
					if s.storm != nil {
						s.flushStorms()
					}
					return
				}
			}
		}
	}
}

func (s *Service) fanOut(ctx context.Context, msgs []Message) {
	ds := make([]Delivery, 0, len(msgs))
	events := make([]Event, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		r, err := s.rosters.get(ctx, s.store, m.Conv)
		if err == nil && r.Version < m.RosterV {
			// The members changed before the message was committed, and
			// the news has not reached this cache (another process made
			// the change): read them as committed now.
			s.rosters.forget(m.Conv)
			r, err = s.rosters.get(ctx, s.store, m.Conv)
		}
		if err != nil {
			// Members will find the message with their next sync.
			s.log.Warn("fan-out: roster", "conv", m.Conv, "err", err)
			continue
		}
		if s.notify != nil {
			s.notify.observe(msgs[i:i+1], r)
		}
		if s.bufferStorm(r, m) {
			continue
		}
		events[i] = Event{Type: EventMessage, Conv: m.Conv, ExceptSession: m.Origin, Message: m}
		if m.hidesTarget(r.latestJoin) {
			see, blind := r.splitTarget(m.Seq, m.Target)
			rm := m.redacted()
			ds = append(ds, Delivery{Users: see, Event: &events[i]},
				Delivery{Users: blind, Event: &Event{Type: EventMessage, Conv: m.Conv, ExceptSession: m.Origin, Message: &rm}})
			continue
		}
		ds = append(ds, Delivery{Users: r.recipients(m.Seq), Event: &events[i]})
	}
	if len(ds) > 0 {
		s.deliver.DeliverAll(ds)
	}
}

// checkAttachments refuses what no store look-up is needed to refuse.
func checkAttachments(ids []string) error {
	if len(ids) > MaxAttachments {
		return Errorf(EBadRequest, "at most %d attachments per message, not %d", MaxAttachments, len(ids))
	}
	for i, id := range ids {
		if id == "" || len(id) > 64 || !storable(id) {
			return Errorf(EBadRequest, "attachments[%d] is not a file id", i)
		}
		for _, prev := range ids[:i] {
			if prev == id {
				return Errorf(EBadRequest, "attachment %s is listed twice", id)
			}
		}
	}
	return nil
}

// attachmentIDs carries the attachment ids to the store, which replaces
// them by the file objects.
func attachmentIDs(ids []string) []File {
	if len(ids) == 0 {
		return nil
	}
	files := make([]File, len(ids))
	for i, id := range ids {
		files[i].ID = id
	}
	return files
}
