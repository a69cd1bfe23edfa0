package chat

import "sync"

// recentIDs remembers the messages stored for recent (conv, from,
// client_msg_id) triples, so a retry is answered without touching the
// writer. It is only a shortcut: the store's unique index is the guarantee.
type recentIDs struct {
	mu   sync.Mutex
	m    map[string]Message
	ring []string // insertion order, for bounded eviction
	next int
}

func newRecentIDs(n int) *recentIDs {
	return &recentIDs{m: make(map[string]Message, n), ring: make([]string, n)}
}

func dedupKey(conv, from, clientMsgID string) string {
	return conv + "\x00" + from + "\x00" + clientMsgID
}

func (r *recentIDs) get(conv, from, clientMsgID string) (Message, bool) {
	r.mu.Lock()
	m, ok := r.m[dedupKey(conv, from, clientMsgID)]
	r.mu.Unlock()
	return m, ok
}

func (r *recentIDs) add(m Message) {
	k := dedupKey(m.Conv, m.From, m.ClientMsgID)
	m.Origin = ""
	r.mu.Lock()
	if _, ok := r.m[k]; !ok {
		if old := r.ring[r.next]; old != "" {
			delete(r.m, old)
		}
		r.ring[r.next] = k
		r.next = (r.next + 1) % len(r.ring)
	}
	r.m[k] = m
	r.mu.Unlock()
}
