package server

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/imserver/imserver/chat"
	"github.com/redis/go-redis/v9"
)

// Bus links the processes that share one database through Redis pub/sub.
// It wraps the hub as the chat's Deliverer: every event goes to this
// process's sessions and is published for the others, which hand it to
// theirs. Storage stays the truth: a lost publish only delays delivery
// until the client's next sync.
//
// A storm frame reaches the other processes' members too, and those
// processes follow the storm (RemoteStorm) instead of announcing their own.
type Bus struct {
	rdb     redis.UniversalClient
	channel string
	node    string
	hub     *Hub
	metrics *Metrics
	log     *slog.Logger

	sink BusSink
	out  chan []byte
	// outBytes is what out holds, bounded by busQueueBytes: a message
	// carries a whole commit's fan-out, so a count of messages alone
	// would not bound the memory a stalled Redis makes us hold.
	outBytes atomic.Int64
	// control carries roster changes and logouts: they must not be
	// dropped the way events may, so a full queue waits for room.
	control chan []byte
	done    chan struct{}
	wg      sync.WaitGroup
	ps      *redis.PubSub

	published uint64            // publishLoop's last Seq
	seen      map[string]uint64 // receiveLoop's: each node's last Seq
}

// BusSink is told what other processes changed: a roster to reload ("" for
// all), the messages they committed (the ack clamp follows max seqs), and
// asked whether a token still holds, after the bus may have missed a logout.
type BusSink interface {
	ForgetRoster(conv string)
	ObserveRemote(msgs []chat.Message)
	TokenValid(ctx context.Context, tokenHash []byte) (bool, error)
	RemoteStorm(conv string, active bool, count int)
	// RemoteTyping reports whether a typing event of another process is
	// delivered here (the limit per user and conversation).
	RemoteTyping(user, conv string) bool
}

var (
	_ chat.Deliverer = (*Bus)(nil)
	_ chat.Peers     = (*Bus)(nil)
)

// Kinds of bus messages.
const (
	busEvent  = "event"
	busRoster = "roster"
	busLogout = "logout"
)

type busMessage struct {
	Node string `json:"n"`
	// Seq numbers a node's publishes in the order they go out, from 1. A
	// pipeline of PUBLISH commands that failed after Redis took part of it
	// is sent again whole by the client's retry; receivers drop what they
	// have seen, so a message frame is never delivered twice.
	Seq   uint64     `json:"s,omitempty"`
	Kind  string     `json:"k"`
	Users []string   `json:"u,omitempty"`
	Event *wireEvent `json:"e,omitempty"`
	Conv  string     `json:"c,omitempty"`
	Token string     `json:"t,omitempty"`
}

// wireEvent is chat.Event with the messages' origins, which the domain
// type does not serialise.
type wireEvent struct {
	chat.Event
	Origins []string `json:"origins,omitempty"`
}

// NewBus subscribes to channel and returns the bus; Close stops it.
func NewBus(rdb redis.UniversalClient, channel string, hub *Hub, m *Metrics, log *slog.Logger) *Bus {
	b := &Bus{
		rdb:     rdb,
		channel: channel,
		node:    chat.NewID(),
		hub:     hub,
		metrics: m,
		log:     log,
		out:     make(chan []byte, 8192),
		control: make(chan []byte, 1024),
		done:    make(chan struct{}),
		ps:      rdb.Subscribe(context.Background(), channel),
		seen:    make(map[string]uint64),
	}
	hub.peers = b
	b.wg.Add(2)
	go b.publishLoop()
	go b.receiveLoop()
	return b
}

// Attach sets who hears of other processes' changes (the chat service,
// which is built after the bus).
func (b *Bus) Attach(s BusSink) { b.sink = s }

// Close stops publishing and receiving.
func (b *Bus) Close() {
	close(b.done)
	b.ps.Close()
	b.wg.Wait()
}

// Deliver implements chat.Deliverer.
func (b *Bus) Deliver(users []string, ev *chat.Event) {
	b.DeliverAll([]chat.Delivery{{Users: users, Event: ev}})
}

// DeliverAll implements chat.Deliverer: the events go to this process's
// sessions and, as one binary bus message (bus_codec.go), to the other
// processes. A message is encoded once, for both.
func (b *Bus) DeliverAll(ds []chat.Delivery) {
	held := make(heldWriters)
	enc := busEncoder{node: b.node}
	for _, d := range ds {
		ev := d.Event
		if ev.Type != chat.EventMessage || ev.Message == nil {
			b.hub.deliver(d.Users, ev, held)
			if len(d.Users) > 0 {
				if err := enc.event(d.Users, ev); err != nil {
					b.log.Error("bus: encoding", "type", ev.Type, "err", err)
				}
			}
			continue
		}
		frame, msg, err := encodeEvent(ev)
		if err != nil {
			b.log.Error("encoding event", "type", ev.Type, "err", err)
			continue
		}
		b.hub.deliverFrame(d.Users, ev.Conv, ev.ExceptSession, frame, msg, held)
		if len(d.Users) > 0 {
			enc.message(d.Users, ev, msg)
		}
	}
	held.wake()
	for _, data := range enc.messages() {
		b.queue(data)
	}
}

// RosterChanged implements chat.Peers.
func (b *Bus) RosterChanged(conv string) { b.publishControl(busMessage{Kind: busRoster, Conv: conv}) }

// TokenRevoked tells the other processes to close a logged-out token's
// sessions.
func (b *Bus) TokenRevoked(id string) { b.publishControl(busMessage{Kind: busLogout, Token: id}) }

func (b *Bus) encode(m busMessage) []byte {
	m.Node = b.node
	data, err := json.Marshal(m)
	if err != nil {
		b.log.Error("bus: encoding", "err", err)
		return nil
	}
	return data
}

// stamp puts seq into an encoded busMessage: numbered here, in the order
// of publishing, since the control and event queues are drained
// interleaved.
func stamp(data []byte, seq uint64) []byte {
	out := make([]byte, 0, len(data)+24)
	out = append(out, `{"s":`...)
	out = strconv.AppendUint(out, seq, 10)
	out = append(out, ',')
	return append(out, data[1:]...)
}

// busQueueBytes bounds the events waiting to be published.
const busQueueBytes = 64 << 20

// queue hands an encoded message to publishLoop.
func (b *Bus) queue(data []byte) {
	if b.outBytes.Add(int64(len(data))) > busQueueBytes {
		b.outBytes.Add(-int64(len(data)))
		b.metrics.BusDropped.Inc()
		return
	}
	select {
	case b.out <- data:
	default:
		// Never block delivery: the other processes' clients will sync.
		b.outBytes.Add(-int64(len(data)))
		b.metrics.BusDropped.Inc()
	}
}

// publishControl queues a control message, waiting for room. If Redis is
// down it is lost like any publish, but then the other processes lost
// their subscription too, and they start over (resubscribed) when Redis
// is back.
func (b *Bus) publishControl(m busMessage) {
	if data := b.encode(m); data != nil {
		select {
		case b.control <- data:
		case <-b.done:
		}
	}
}

// publishLoop sends what is queued, many PUBLISH commands per round trip.
func (b *Bus) publishLoop() {
	defer b.wg.Done()
	batch := make([][]byte, 0, 256)
	var lastLog time.Time
	for {
		select {
		case data := <-b.control:
			batch = append(batch[:0], data)
		case data := <-b.out:
			b.outBytes.Add(-int64(len(data)))
			batch = append(batch[:0], data)
		case <-b.done:
			return
		}
	drain:
		for len(batch) < cap(batch) {
			select {
			case data := <-b.control:
				batch = append(batch, data)
			case data := <-b.out:
				b.outBytes.Add(-int64(len(data)))
				batch = append(batch, data)
			default:
				break drain
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		pipe := b.rdb.Pipeline()
		for _, data := range batch {
			b.published++
			if data[0] == busMagic[0] {
				pipe.Publish(ctx, b.channel, stampBinary(data, b.published))
			} else {
				pipe.Publish(ctx, b.channel, stamp(data, b.published))
			}
		}
		_, err := pipe.Exec(ctx)
		cancel()
		if err != nil {
			b.metrics.BusDropped.Add(float64(len(batch)))
			if time.Since(lastLog) > 10*time.Second {
				lastLog = time.Now()
				b.log.Warn("bus: publish failed; other processes' clients will catch up by sync", "err", err)
			}
			continue
		}
		b.metrics.BusPublished.Add(float64(len(batch)))
	}
}

func (b *Bus) receiveLoop() {
	defer b.wg.Done()
	subscribed := false
	for v := range b.ps.ChannelWithSubscriptions() {
		msg, ok := v.(*redis.Message)
		if !ok {
			if sub, ok := v.(*redis.Subscription); ok && sub.Kind == "subscribe" {
				if subscribed {
					b.resubscribed()
				}
				subscribed = true
			}
			continue
		}
		if strings.HasPrefix(msg.Payload, busMagic) {
			if err := b.receiveBinary(msg.Payload); err != nil {
				b.log.Warn("bus: bad message", "err", err)
			}
			continue
		}
		var m busMessage
		if err := json.Unmarshal([]byte(msg.Payload), &m); err != nil {
			b.log.Warn("bus: bad message", "err", err)
			continue
		}
		if !b.fresh(m.Node, m.Seq) {
			continue // ours, or a retried publish that had arrived already
		}
		b.receive(&m)
	}
}

// resubscribed starts over after the subscription was lost (Redis
// restarted or unreachable): whatever roster change or logout was published
// meanwhile is lost, so every cached roster is dropped and the token of
// every open session is checked again.
func (b *Bus) resubscribed() {
	b.log.Info("bus: subscribed again; reloading rosters and checking sessions' tokens")
	if b.sink == nil {
		return
	}
	b.sink.ForgetRoster("")
	for _, s := range b.hub.sessions() {
		hash, err := hex.DecodeString(s.tokenHash)
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ok, err := b.sink.TokenValid(ctx, hash)
		cancel()
		if err == nil && !ok {
			s.close(websocket.StatusPolicyViolation, "logged out")
		}
	}
}

// fresh reports whether the publish seq of node is new, and remembers it:
// a pipeline of PUBLISH commands retried after a failure must not deliver
// what already arrived.
func (b *Bus) fresh(node string, seq uint64) bool {
	if node == b.node {
		return false
	}
	if seq != 0 {
		if seq <= b.seen[node] {
			return false
		}
		b.seen[node] = seq
	}
	return true
}

// receiveBinary hands another process's events to the sessions here. The
// seqs of its messages are made known (the ack clamp) before any session
// here can see them; a message no session here is to get is never framed.
func (b *Bus) receiveBinary(payload string) error {
	var (
		ents []busEntry
		seqs []chat.Message
	)
	err := decodeBus(payload, b.fresh, func(e *busEntry) {
		ents = append(ents, *e)
		if !e.event {
			seqs = append(seqs, chat.Message{Conv: e.conv, Seq: e.seq})
		}
	})
	if err != nil {
		// Nothing of a damaged message is delivered: its members get it by
		// sync.
		ents = ents[:0]
		seqs = seqs[:0]
	}
	if len(seqs) > 0 && b.sink != nil {
		b.sink.ObserveRemote(seqs)
	}
	held := make(heldWriters)
	for i := range ents {
		e := &ents[i]
		if !e.event {
			b.hub.deliverMessageJSON(e.users, e.conv, e.except, e.body, held)
			continue
		}
		var w wireEvent
		if err := json.Unmarshal([]byte(e.body), &w); err != nil {
			b.log.Warn("bus: bad event", "err", err)
			continue
		}
		b.receiveEvent(e.users, &w, held)
	}
	held.wake()
	return err
}

func (b *Bus) receive(m *busMessage) {
	switch m.Kind {
	case busEvent:
		if m.Event == nil {
			return
		}
		b.receiveEvent(m.Users, m.Event, nil)
	case busRoster:
		if b.sink != nil {
			b.sink.ForgetRoster(m.Conv)
		}
	case busLogout:
		b.hub.closeToken(m.Token)
	}
}

// receiveEvent hands an event of another process (JSON) to the sessions
// here.
func (b *Bus) receiveEvent(users []string, w *wireEvent, held heldWriters) {
	ev := &w.Event
	origins := w.Origins
	if ev.Message != nil && len(origins) > 0 {
		ev.Message.Origin = origins[0]
	}
	for i := range ev.Messages {
		if i < len(origins) {
			ev.Messages[i].Origin = origins[i]
		}
	}
	if b.sink != nil {
		switch {
		case ev.Type == chat.EventStorm:
			b.sink.RemoteStorm(ev.Conv, ev.Active, ev.Count)
		case ev.Type == chat.EventTyping:
			if !b.sink.RemoteTyping(ev.User, ev.Conv) {
				return
			}
		case ev.Message != nil:
			b.sink.ObserveRemote([]chat.Message{*ev.Message})
		case len(ev.Messages) > 0:
			b.sink.ObserveRemote(ev.Messages)
		}
	}
	b.hub.deliver(users, ev, held)
}
