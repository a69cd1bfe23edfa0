package chat

import (
	"context"
	"sync"
	"time"
)

// ackBuffer keeps the latest cumulative ack of each member in memory until
// the next flush, so that 500 members acking cost one transaction.
type ackBuffer struct {
	mu sync.Mutex
	m  map[ackKey]int64
	// inflight holds the batch being written, so that reads see it too.
	inflight map[ackKey]int64
}

type ackKey struct{ conv, user string }

func newAckBuffer() *ackBuffer {
	return &ackBuffer{m: make(map[ackKey]int64)}
}

func (b *ackBuffer) add(conv, user string, seq int64) {
	k := ackKey{conv, user}
	b.mu.Lock()
	if seq > b.m[k] {
		b.m[k] = seq
	}
	b.mu.Unlock()
}

func (b *ackBuffer) pending(conv, user string) int64 {
	k := ackKey{conv, user}
	b.mu.Lock()
	defer b.mu.Unlock()
	return max(b.m[k], b.inflight[k])
}

// pendingOf returns user's acks waiting in memory, by conversation.
func (b *ackBuffer) pendingOf(user string) map[string]int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]int64)
	for _, m := range []map[ackKey]int64{b.m, b.inflight} {
		for k, seq := range m {
			if k.user == user && seq > out[k.conv] {
				out[k.conv] = seq
			}
		}
	}
	return out
}

func (b *ackBuffer) take() []Ack {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.m) == 0 {
		return nil
	}
	out := make([]Ack, 0, len(b.m))
	for k, seq := range b.m {
		out = append(out, Ack{Conv: k.conv, User: k.user, Seq: seq})
	}
	b.inflight, b.m = b.m, make(map[ackKey]int64)
	return out
}

func (b *ackBuffer) done() {
	b.mu.Lock()
	b.inflight = nil
	b.mu.Unlock()
}

// Ack records a cumulative receive ack. It is written to the store with the
// next flush; smaller values than the stored one are no-ops.
func (s *Service) Ack(ctx context.Context, me, conv string, seq int64) error {
	ms, err := s.marker(ctx, me, conv, seq)
	if err != nil {
		return err
	}
	// Clamp now, to what exists now: stored later, after more messages,
	// the store's clamp would let the ack cover messages not yet sent.
	limit := ms.MaxSeq
	if !ms.Left {
		var ok bool
		// An ack past what this process has seen committed is read
		// against the store: another process sharing it may have
		// committed more (its commits reach this one's cache only where
		// the bus delivers them), and clamped to a stale max the ack
		// would be stored lower than it was sent.
		if limit, ok = s.maxSeqs.get(conv); !ok || seq > limit {
			c, err := s.store.Conversation(ctx, conv, me)
			if err != nil {
				return err
			}
			limit = s.maxSeqs.learn(conv, c.MaxSeq)
		}
	}
	s.acks.add(conv, me, min(seq, limit))
	// Kept in memory and written once the disk takes writes again; the
	// client still hears that nothing is stored now.
	return s.store.WriteHealth()
}

// maxSeqs remembers each conversation's largest committed seq, updated by
// the commit hook, so that acks are clamped without a query.
type maxSeqs struct {
	mu sync.RWMutex
	m  map[string]int64
}

func (m *maxSeqs) advance(msgs []Message) {
	m.mu.Lock()
	for i := range msgs {
		m.raiseLocked(msgs[i].Conv, msgs[i].Seq)
	}
	m.mu.Unlock()
}

// learn records a max seq read from the store and returns the largest known.
// Taking the larger of the two makes it safe against a commit that advanced
// the entry after the store was read.
func (m *maxSeqs) learn(conv string, seq int64) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.raiseLocked(conv, seq)
	return m.m[conv]
}

func (m *maxSeqs) raiseLocked(conv string, seq int64) {
	if m.m == nil || len(m.m) > 100_000 {
		m.m = make(map[string]int64)
	}
	if seq > m.m[conv] {
		m.m[conv] = seq
	}
}

// get knows the conversations that had a message or an ack since start.
func (m *maxSeqs) get(conv string) (int64, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	v, ok := m.m[conv]
	return v, ok
}

// marker checks a receive or read marker's arguments and that I may read
// conv.
func (s *Service) marker(ctx context.Context, me, conv string, seq int64) (Membership, error) {
	if conv == "" {
		return Membership{}, Errorf(EBadRequest, "conv is required")
	}
	if seq < 0 {
		return Membership{}, Errorf(EBadRequest, "seq must be >= 0")
	}
	return s.visible(ctx, conv, me)
}

// visible checks that I may read conv: a current member, or a former one
// within its range.
func (s *Service) visible(ctx context.Context, conv, me string) (Membership, error) {
	if !storable(conv) {
		return Membership{}, errNoSuch
	}
	if r, err := s.rosters.get(ctx, s.store, conv); err == nil {
		if role, ok := r.roles[me]; ok {
			return Membership{Conv: conv, Kind: r.Kind, User: me, Role: role}, nil
		}
	}
	return s.store.Membership(ctx, conv, me)
}

func (s *Service) flushAcks() {
	acks := s.acks.take()
	if len(acks) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.store.SaveAcks(ctx, acks); err != nil {
		if ErrorCode(err) != EUnavailable {
			// The store logs when writes start and stop failing.
			s.log.Error("saving acks", "n", len(acks), "err", err)
		}
		// Put them back: acks are cumulative, the next flush retries.
		for _, a := range acks {
			s.acks.add(a.Conv, a.User, a.Seq)
		}
	}
	s.acks.done()
}

func (s *Service) flushAcksLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.AckFlushInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			s.flushAcks()
		case <-s.stop:
			s.flushAcks()
			return
		}
	}
}
