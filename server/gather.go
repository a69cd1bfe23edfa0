package server

import "sync"

// gathering holds the writers of the sessions that got something while a
// Gather runs; they are woken once at its end.
type gathering struct {
	mu   sync.Mutex
	held heldWriters // nil once the Gather ended
}

// Gather implements chat.Gatherer: while fn runs, a session whose writer
// would start (a delivery, the answer to a send) waits instead, and each
// such writer starts once when fn returns. The commit hook's goroutine
// runs one Gather at a time; other goroutines' frames queued meanwhile
// wait for its end too, which is about as long as it takes to queue them.
func (h *Hub) Gather(fn func()) {
	g := &gathering{held: make(heldWriters)}
	h.gather.Store(g)
	defer func() {
		h.gather.Store(nil)
		g.mu.Lock()
		held := g.held
		g.held = nil
		g.mu.Unlock()
		for s := range held {
			s.kick()
		}
	}()
	fn()
}

// hold adds s to the running Gather, if any; false means start its writer
// now. The caller holds s.mu.
func (h *Hub) hold(s *session) bool {
	g := h.gather.Load()
	if g == nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held == nil {
		return false
	}
	g.held[s] = struct{}{}
	return true
}

// Gather implements chat.Gatherer.
func (b *Bus) Gather(fn func()) { b.hub.Gather(fn) }
