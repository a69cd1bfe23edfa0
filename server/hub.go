package server

import (
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/coder/websocket"
	"github.com/imserver/imserver/chat"
)

// Hub knows which sessions each user has open and hands them events. It
// implements chat.Deliverer.
type Hub struct {
	log     *slog.Logger
	metrics *Metrics

	mu    sync.RWMutex
	users map[string]map[*session]struct{}

	// peers hears of logouts, for the other processes; nil when alone.
	peers interface{ TokenRevoked(id string) }

	gather atomic.Pointer[gathering] // the running Gather (gather.go)
}

var (
	_ chat.Deliverer = (*Hub)(nil)
	_ chat.Gatherer  = (*Hub)(nil)
	_ chat.Gatherer  = (*Bus)(nil)
)

// NewHub returns an empty hub.
func NewHub(log *slog.Logger, m *Metrics) *Hub {
	return &Hub{log: log, metrics: m, users: make(map[string]map[*session]struct{})}
}

func (h *Hub) add(s *session) {
	h.mu.Lock()
	set := h.users[s.user.ID]
	if set == nil {
		set = make(map[*session]struct{})
		h.users[s.user.ID] = set
	}
	set[s] = struct{}{}
	h.mu.Unlock()
	h.metrics.Sessions.Inc()
}

func (h *Hub) remove(s *session) {
	h.mu.Lock()
	if set := h.users[s.user.ID]; set != nil {
		delete(set, s)
		if len(set) == 0 {
			delete(h.users, s.user.ID)
		}
	}
	h.mu.Unlock()
	h.metrics.Sessions.Dec()
}

// Deliver implements chat.Deliverer: the frame is encoded once and queued to
// every session of users but the excepted one, without waiting for any.
func (h *Hub) Deliver(users []string, ev *chat.Event) {
	h.deliver(users, ev, nil)
}

// DeliverAll implements chat.Deliverer. The sessions' writers are woken
// once all is queued, so a session in ten busy groups gets a commit's
// messages in one write of a few batch frames rather than piecemeal.
func (h *Hub) DeliverAll(ds []chat.Delivery) {
	held := make(heldWriters)
	for _, d := range ds {
		h.deliver(d.Users, d.Event, held)
	}
	held.wake()
}

// heldWriters are the sessions whose writers wait for the end of a
// DeliverAll; nil wakes writers at once.
type heldWriters map[*session]struct{}

func (h *Hub) deliver(users []string, ev *chat.Event, held heldWriters) {
	if ev.Type == chat.EventBatch {
		h.deliverBatch(users, ev, held)
		return
	}
	frame, msg, err := encodeEvent(ev)
	if err != nil {
		h.log.Error("encoding event", "type", ev.Type, "err", err)
		return
	}
	h.deliverFrame(users, ev.Conv, ev.ExceptSession, frame, msg, held)
}

// deliverFrame queues an encoded event (msg: the message in it, for batch
// frames) to every session of users but except.
func (h *Hub) deliverFrame(users []string, conv, except string, frame, msg []byte, held heldWriters) {
	it := &outItem{conv: conv, frame: frame, msg: msg}
	n := 0
	h.mu.RLock()
	for _, u := range users {
		for s := range h.users[u] {
			if s.id != except {
				s.enqueue(it, held)
				n++
			}
		}
	}
	h.mu.RUnlock()
	if msg != nil {
		h.metrics.Deliveries.Add(float64(n))
	}
}

// deliverMessageJSON queues a msg frame around a message's wire JSON, as
// another node encoded it (bus), to users' sessions here; it builds the
// frame only if one of them has a session here.
func (h *Hub) deliverMessageJSON(users []string, conv, except, msgJSON string, held heldWriters) {
	if !h.anyOnline(users) {
		return
	}
	frame := make([]byte, 0, len(msgFrameHead)+len(msgJSON)+1)
	frame = append(frame, msgFrameHead...)
	frame = append(frame, msgJSON...)
	msg := frame[len(msgFrameHead):len(frame):len(frame)]
	frame = append(frame, '}')
	h.deliverFrame(users, conv, except, frame, msg, held)
}

// anyOnline reports whether one of users has a session here.
func (h *Hub) anyOnline(users []string) bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for _, u := range users {
		if len(h.users[u]) > 0 {
			return true
		}
	}
	return false
}

// wake starts the writers a DeliverAll held.
func (held heldWriters) wake() {
	for s := range held {
		s.kick()
	}
}

// revokeToken closes a logged-out token's sessions here and in the other
// processes.
func (h *Hub) revokeToken(id string) {
	h.closeToken(id)
	if h.peers != nil {
		h.peers.TokenRevoked(id)
	}
}

// closeToken closes the sessions opened with a revoked token.
func (h *Hub) closeToken(tokenHash string) {
	for _, s := range h.sessions() {
		if s.tokenHash == tokenHash {
			s.close(websocket.StatusPolicyViolation, "logged out")
		}
	}
}

// CloseAll closes every session with status going away (shutdown).
func (h *Hub) CloseAll() {
	for _, s := range h.sessions() {
		s.close(websocket.StatusGoingAway, "server shutting down")
	}
}

func (h *Hub) sessions() []*session {
	h.mu.RLock()
	defer h.mu.RUnlock()
	var all []*session
	for _, set := range h.users {
		for s := range set {
			all = append(all, s)
		}
	}
	return all
}
