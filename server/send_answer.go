package server

import (
	"encoding/json"

	"github.com/imserver/imserver/chat"
)

// Sends are answered without a goroutine per session waiting for them: the
// store calls back (chat.SubmitNotify) on the goroutine that fans its
// commit out, inside the hub's Gather, so the `sent` of a send and the
// messages this session gets from the same commit leave in one write.
// Answers keep the order of the sends: an answer that comes early (a
// refused send behind one still being stored) waits for those before it.

// pendingSend is a send waiting for its answer.
type pendingSend struct {
	req   reqID
	frame []byte // the answer, once known
	done  bool
}

// pending registers a send, in arrival order; the reader calls it before
// submitting, for every send that holds an inflight slot.
func (s *session) pending(req reqID) *pendingSend {
	p := &pendingSend{req: req}
	s.sendMu.Lock()
	s.sends = append(s.sends, p)
	s.sendMu.Unlock()
	return p
}

// answered records p's outcome and queues every answer now due, in order.
// It never waits: answers are bounded by the inflight slots, which each
// holds until the writer takes it (releaseSlots), so a client that does not
// read stops being read instead of growing the queue.
func (s *session) answered(p *pendingSend, m *chat.Message, dup bool, err error) {
	var b []byte
	if err != nil {
		if chat.ErrorCode(err) == chat.ERateLimited {
			s.srv.metrics.RateLimited.Inc()
		}
		b, err = json.Marshal(errorFrameOf(p.req, err))
		if err != nil {
			s.srv.log.Error("encoding reply", "err", err)
		}
	} else {
		b = sentReply(p.req, m, dup)
	}
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	p.frame, p.done = b, true
	n := 0
	for n < len(s.sends) && s.sends[n].done {
		n++
	}
	if n == 0 {
		return
	}
	dropped := 0
	s.mu.Lock()
	for _, q := range s.sends[:n] {
		if s.closed || q.frame == nil {
			dropped++
			continue
		}
		s.queue = append(s.queue, &outItem{frame: q.frame, reply: true, slot: true})
	}
	s.startWriterLocked()
	s.mu.Unlock()
	for range dropped {
		<-s.inflight
	}
	clear(s.sends[:n])
	s.sends = s.sends[n:]
	if len(s.sends) == 0 {
		s.sends = nil
	}
}

// releaseSlots frees the inflight slots of the answers the writer took.
func (s *session) releaseSlots(items []*outItem) {
	for _, it := range items {
		if it.slot {
			<-s.inflight
		}
	}
}
