package chat

import (
	"context"
	"hash/maphash"
	"sync"
)

// recentIDs remembers the seqs stored for recent (conv, from,
// client_msg_id) triples, so that a retry is answered without the writer.
// It is only a shortcut: the store's unique index is the guarantee.
//
// Keys are 64-bit hashes and values seqs: a map without pointers, which the
// garbage collector does not scan however large it is (holding the
// messages themselves made every collection walk a hundred thousand
// bodies). A hit is confirmed against the stored message.
type recentIDs struct {
	mu   sync.Mutex
	seed maphash.Seed
	m    map[uint64]int64
	ring []uint64 // insertion order, for bounded eviction
	next int
	full bool
}

func newRecentIDs(n int) *recentIDs {
	return &recentIDs{seed: maphash.MakeSeed(), m: make(map[uint64]int64, n), ring: make([]uint64, n)}
}

func (r *recentIDs) key(conv, from, clientMsgID string) uint64 {
	var h maphash.Hash
	h.SetSeed(r.seed)
	h.WriteString(conv)
	h.WriteByte(0)
	h.WriteString(from)
	h.WriteByte(0)
	h.WriteString(clientMsgID)
	return h.Sum64()
}

func (r *recentIDs) get(conv, from, clientMsgID string) (int64, bool) {
	k := r.key(conv, from, clientMsgID)
	r.mu.Lock()
	seq, ok := r.m[k]
	r.mu.Unlock()
	return seq, ok
}

func (r *recentIDs) add(m Message) {
	k := r.key(m.Conv, m.From, m.ClientMsgID)
	r.mu.Lock()
	if _, ok := r.m[k]; !ok {
		if r.full {
			delete(r.m, r.ring[r.next])
		}
		r.ring[r.next] = k
		r.next = (r.next + 1) % len(r.ring)
		r.full = r.full || r.next == 0
	}
	r.m[k] = m.Seq
	r.mu.Unlock()
}

// retried returns the message stored for a retry of req by from, when the
// recent ids know it and the store confirms it.
func (s *Service) retried(ctx context.Context, from string, req *SendRequest) (Message, bool) {
	seq, ok := s.dedup.get(req.Conv, from, req.ClientMsgID)
	if !ok {
		return Message{}, false
	}
	p, err := s.store.Messages(ctx, req.Conv, from, PageQuery{After: seq - 1, Limit: 1})
	if err != nil || len(p.Messages) == 0 {
		return Message{}, false
	}
	m := p.Messages[0]
	if m.Seq != seq || m.From != from || m.ClientMsgID != req.ClientMsgID {
		return Message{}, false
	}
	return m, true
}
