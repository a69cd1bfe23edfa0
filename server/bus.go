package server

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/imserver/imserver/chat"
	"github.com/redis/go-redis/v9"
)

// Bus links the processes that share one database through Redis pub/sub.
// It wraps the hub as the chat's Deliverer: every event goes to this
// process's sessions and is published for the others, which hand it to
// theirs. Storage stays the truth: a lost publish only delays delivery
// until the client's next sync.
//
// Storm frames are not published: every process detects storms from the
// shared window and tells its own sessions.
type Bus struct {
	rdb     redis.UniversalClient
	channel string
	node    string
	hub     *Hub
	metrics *Metrics
	log     *slog.Logger

	sink BusSink
	out  chan []byte
	done chan struct{}
	wg   sync.WaitGroup
	ps   *redis.PubSub
}

// BusSink is told what other processes changed: a roster to reload, and
// the messages they committed (the ack clamp follows max seqs).
type BusSink interface {
	ForgetRoster(conv string)
	ObserveRemote(msgs []chat.Message)
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
	Node  string     `json:"n"`
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
		done:    make(chan struct{}),
		ps:      rdb.Subscribe(context.Background(), channel),
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
	b.hub.Deliver(users, ev)
	if ev.Type == chat.EventStorm || len(users) == 0 {
		return
	}
	w := &wireEvent{Event: *ev}
	if ev.Message != nil {
		w.Origins = []string{ev.Message.Origin}
	}
	for _, m := range ev.Messages {
		w.Origins = append(w.Origins, m.Origin)
	}
	b.publish(busMessage{Kind: busEvent, Users: users, Event: w})
}

// RosterChanged implements chat.Peers.
func (b *Bus) RosterChanged(conv string) { b.publish(busMessage{Kind: busRoster, Conv: conv}) }

// TokenRevoked tells the other processes to close a logged-out token's
// sessions.
func (b *Bus) TokenRevoked(id string) { b.publish(busMessage{Kind: busLogout, Token: id}) }

func (b *Bus) publish(m busMessage) {
	m.Node = b.node
	data, err := json.Marshal(m)
	if err != nil {
		b.log.Error("bus: encoding", "err", err)
		return
	}
	select {
	case b.out <- data:
	default:
		// Never block delivery: the other processes' clients will sync.
		b.metrics.BusDropped.Inc()
	}
}

// publishLoop sends what is queued, many PUBLISH commands per round trip.
func (b *Bus) publishLoop() {
	defer b.wg.Done()
	batch := make([][]byte, 0, 256)
	var lastLog time.Time
	for {
		select {
		case data := <-b.out:
			batch = append(batch[:0], data)
		case <-b.done:
			return
		}
	drain:
		for len(batch) < cap(batch) {
			select {
			case data := <-b.out:
				batch = append(batch, data)
			default:
				break drain
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		pipe := b.rdb.Pipeline()
		for _, data := range batch {
			pipe.Publish(ctx, b.channel, data)
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
	for msg := range b.ps.Channel() {
		var m busMessage
		if err := json.Unmarshal([]byte(msg.Payload), &m); err != nil {
			b.log.Warn("bus: bad message", "err", err)
			continue
		}
		if m.Node == b.node {
			continue
		}
		b.receive(&m)
	}
}

func (b *Bus) receive(m *busMessage) {
	switch m.Kind {
	case busEvent:
		if m.Event == nil {
			return
		}
		ev := &m.Event.Event
		origins := m.Event.Origins
		if ev.Message != nil && len(origins) > 0 {
			ev.Message.Origin = origins[0]
		}
		for i := range ev.Messages {
			if i < len(origins) {
				ev.Messages[i].Origin = origins[i]
			}
		}
		b.hub.Deliver(m.Users, ev)
		if b.sink != nil {
			switch {
			case ev.Message != nil:
				b.sink.ObserveRemote([]chat.Message{*ev.Message})
			case len(ev.Messages) > 0:
				b.sink.ObserveRemote(ev.Messages)
			}
		}
	case busRoster:
		if b.sink != nil {
			b.sink.ForgetRoster(m.Conv)
		}
	case busLogout:
		b.hub.closeToken(m.Token)
	}
}
