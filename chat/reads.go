package chat

import (
	"context"
	"sync"
	"time"
)

// Read moves my read marker of conv up to seq. My other sessions get a
// `read` frame (all of them when origin is empty, i.e. over HTTP); the peer
// of a direct conversation gets a receipt at once, group members get
// coalesced receipts.
func (s *Service) Read(ctx context.Context, me, origin, conv string, seq int64) error {
	ms, err := s.marker(ctx, me, conv, seq)
	if err != nil {
		return err
	}
	read, moved, err := s.store.SetRead(ctx, conv, me, seq)
	if err != nil || !moved {
		return err
	}
	s.deliver.Deliver([]string{me}, &Event{Type: EventRead, Conv: conv, Seq: read, ExceptSession: origin})
	if ms.Left {
		// A receipt is another member's read (PROTOCOL.md): a former
		// member's marker is its own business.
		return nil
	}
	r, err := s.rosters.get(ctx, s.store, conv)
	if err != nil {
		return nil // the marker is stored; receipts are best effort
	}
	if ms.Kind == Direct || r.Kind == Direct {
		peers := make([]string, 0, 1)
		for _, id := range r.ids {
			if id != me {
				peers = append(peers, id)
			}
		}
		s.deliver.Deliver(peers, &Event{Type: EventReceipt, Conv: conv, User: me, Seq: read})
		return nil
	}
	s.receipts.add(conv, me, read)
	return nil
}

// receiptBuffer collects group read markers between flushes.
type receiptBuffer struct {
	mu sync.Mutex
	m  map[string][]Read // conv -> reads in arrival order, one per user
}

func newReceiptBuffer() *receiptBuffer {
	return &receiptBuffer{m: make(map[string][]Read)}
}

func (b *receiptBuffer) add(conv, user string, seq int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	reads := b.m[conv]
	for i := range reads {
		if reads[i].User == user {
			reads = append(reads[:i], reads[i+1:]...)
			break
		}
	}
	b.m[conv] = append(reads, Read{User: user, Seq: seq})
}

func (b *receiptBuffer) take() map[string][]Read {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.m) == 0 {
		return nil
	}
	m := b.m
	b.m = make(map[string][]Read)
	return m
}

// flushReceipts sends each online member of each group one receipt frame
// naming everyone whose marker moved in the interval.
func (s *Service) flushReceipts() {
	ctx := context.Background()
	for conv, reads := range s.receipts.take() {
		r, err := s.rosters.get(ctx, s.store, conv)
		if err != nil {
			continue
		}
		// A receipt tells of another member: the last reader, which names
		// the frame, is sent the read before its own instead, or nothing
		// when it read alone.
		last := reads[len(reads)-1]
		others := make([]string, 0, len(r.ids))
		for _, id := range r.ids {
			if id != last.User {
				others = append(others, id)
			}
		}
		s.deliver.Deliver(others, &Event{Type: EventReceipt, Conv: conv, User: last.User, Seq: last.Seq, Reads: reads})
		if _, member := r.roles[last.User]; member && len(reads) > 1 {
			prev := reads[len(reads)-2]
			s.deliver.Deliver([]string{last.User}, &Event{Type: EventReceipt, Conv: conv, User: prev.User, Seq: prev.Seq, Reads: reads})
		}
	}
}

func (s *Service) flushReceiptsLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.ReceiptInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			s.flushReceipts()
		case <-s.stop:
			s.flushReceipts()
			return
		}
	}
}

// Messages returns a page of conv as I may see it.
func (s *Service) Messages(ctx context.Context, me, conv string, q PageQuery) (Page, error) {
	if q.After < 0 || q.Before < 0 {
		return Page{}, Errorf(EBadRequest, "after_seq and before_seq must be >= 0")
	}
	if q.After > 0 && q.Backward {
		return Page{}, Errorf(EBadRequest, "give after_seq or before_seq, not both")
	}
	if !storable(conv) {
		return Page{}, errNoSuch
	}
	q.Limit = clampLimit(q.Limit)
	p, err := s.store.Messages(ctx, conv, me, q)
	if err != nil {
		return p, err
	}
	return p, s.redactPage(ctx, me, conv, &p)
}

// redactPage redacts the mutations of p whose targets me cannot see (sent
// before it joined or cleared), as live delivery does.
func (s *Service) redactPage(ctx context.Context, me, conv string, p *Page) error {
	mutations := false
	for i := range p.Messages {
		mutations = mutations || p.Messages[i].Target != 0
	}
	if !mutations {
		return nil
	}
	var minSeq int64
	if r, err := s.rosters.get(ctx, s.store, conv); err == nil && r.roles[me] != "" {
		for _, m := range r.Members {
			if m.UserID == me {
				minSeq = m.MinSeq
			}
		}
	} else {
		// A former member: its range is kept in its entry.
		c, err := s.Conversation(ctx, me, conv)
		if err != nil {
			return err
		}
		minSeq = c.MinSeq
	}
	for i := range p.Messages {
		if p.Messages[i].hidesTarget(minSeq) {
			p.Messages[i] = p.Messages[i].redacted()
		}
	}
	return nil
}
