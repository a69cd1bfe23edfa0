package chat

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/imserver/imserver/seq"
)

// StormWindow counts a group's messages over a sliding window (in process,
// Redis, or the fallback between them). EventQueue holds best-effort
// outbound events (storm alerts, webhooks) in bounded per-key queues. Both
// are seq's interfaces, named here so that the server, which does not import
// seq, can speak of them.
type (
	StormWindow = seq.Window
	EventQueue  = seq.Queue
)

// EventsKey is the queue every outbound event is pushed to.
const EventsKey = "events"

// Types of the outbound events on the queue.
const (
	AlertStormStarted = "storm.started"
	AlertStormEnded   = "storm.ended"
)

// StormAlert is the outbound event of a storm starting or ending, as pushed
// on the event queue (JSON).
type StormAlert struct {
	Type      string `json:"type"`
	TS        int64  `json:"ts"`
	Conv      string `json:"conv"`
	Count     int    `json:"count"`
	Threshold int    `json:"threshold"`
	WindowMS  int64  `json:"window_ms"`
	Since     int64  `json:"since"`
	// DurationMS is how long the storm lasted (storm.ended).
	DurationMS int64 `json:"duration_ms,omitempty"`
}

// Observer is told what the metrics count. Every method must be cheap and
// safe for concurrent use.
type Observer interface {
	StormStarted(conv string, count int)
	StormEnded(conv string, count int, lasted time.Duration)
	// WindowCount reports a group's window count after one of its messages.
	WindowCount(count int)
	// StormBatch reports one batch of a storming group handed to the deliverer.
	StormBatch(messages int)
	// EventPushed reports a push on the event queue: the entries it pushed
	// out of the queue, or why it failed.
	EventPushed(dropped int, err error)
}

type nopObserver struct{}

func (nopObserver) StormStarted(string, int)              {}
func (nopObserver) StormEnded(string, int, time.Duration) {}
func (nopObserver) WindowCount(int)                       {}
func (nopObserver) StormBatch(int)                        {}
func (nopObserver) EventPushed(int, error)                {}

// StormConfig sets storm mode for groups. Direct conversations never storm.
type StormConfig struct {
	// Threshold: more messages than this in Window puts a group in storm
	// mode. 0 turns storm mode off.
	Threshold int
	// LowerMark: the storm ends when the count falls below it (hysteresis,
	// so that a group hovering at the threshold does not flap). Default
	// Threshold/2.
	LowerMark int
	Window    time.Duration // default 60s
	// FlushInterval is how often a storming group's messages leave as one
	// batch. Default 300ms.
	FlushInterval time.Duration
	// Counter counts the window; nil means an in-process seq.LocalWindow.
	// Its counts must be exact up to Threshold+1.
	Counter StormWindow
}

func (c *StormConfig) setDefaults() {
	if c.Threshold <= 0 {
		return
	}
	if c.Window <= 0 {
		c.Window = 60 * time.Second
	}
	if c.LowerMark <= 0 || c.LowerMark > c.Threshold {
		c.LowerMark = max(1, c.Threshold/2)
	}
	if c.FlushInterval <= 0 {
		c.FlushInterval = 300 * time.Millisecond
	}
	if c.Counter == nil {
		c.Counter = seq.NewLocalWindow(c.Window, c.Threshold+1)
	}
}

// storming is the hysteresis: whether a group whose window holds count
// messages storms, given whether it stormed before.
func (c *StormConfig) storming(was bool, count int) bool {
	if was {
		return count >= c.LowerMark
	}
	return count > c.Threshold
}

// stormCheckInterval is how often storming groups are counted again, so
// that the end of a storm is noticed within a second without a message to
// trigger it.
const stormCheckInterval = 250 * time.Millisecond

// Storm is a group in storm mode, as the admin API lists it.
type Storm struct {
	Conv  string `json:"conv"`
	Name  string `json:"name"`
	Count int    `json:"count"`
	Since int64  `json:"since"` // unix ms
}

// stormMode is the storm policy and the dispatcher's buffers. The policy
// (which groups storm) is shared under mu; the buffers belong to the
// dispatcher goroutine alone.
type stormMode struct {
	cfg StormConfig

	mu     sync.RWMutex
	active map[string]*stormState
	// changes carries the transitions to the dispatcher in the order they
	// happened: they are sent with mu held.
	changes chan stormChange

	bufs map[string]*stormBuffer // dispatcher only
}

type stormState struct {
	since time.Time
	count atomic.Int64
	// remote: another process detected the storm and told its members
	// (through the bus) when it started and will tell them when it ends;
	// this one only follows, quietly.
	remote bool
}

type stormChange struct {
	conv   string
	active bool
	count  int
	since  time.Time
	quiet  bool // the storm frame went out already (another process sent it)
}

// stormBuffer holds a storming group's committed messages until the next
// flush, in seq order, in runs that share their recipients, so that each
// message reaches exactly the members it would have reached on its own.
type stormBuffer struct {
	runs []stormRun
}

type stormRun struct {
	roster *cachedRoster
	ids    []string // recipients of every message of the run
	msgs   []Message
	split  bool // a mutation's run for those who can or cannot see its target
}

func newStormMode(cfg StormConfig) *stormMode {
	if cfg.Threshold <= 0 {
		return nil
	}
	return &stormMode{
		cfg:     cfg,
		active:  make(map[string]*stormState),
		changes: make(chan stormChange, 256),
		bufs:    make(map[string]*stormBuffer),
	}
}

func (b *stormBuffer) add(r *cachedRoster, m Message) {
	if m.hidesTarget(r.latestJoin) {
		// Two runs of their own, never merged into: their recipients are
		// not a prefix of the roster by join order.
		see, blind := r.splitTarget(m.Seq, m.Target)
		b.runs = append(b.runs, stormRun{roster: r, ids: see, msgs: []Message{m}, split: true},
			stormRun{roster: r, ids: blind, msgs: []Message{m.redacted()}, split: true})
		return
	}
	ids := r.recipients(m.Seq)
	// Of one roster, the recipients of a later seq include those of an
	// earlier one: as many means the same.
	if n := len(b.runs); n > 0 && !b.runs[n-1].split && b.runs[n-1].roster == r && len(b.runs[n-1].ids) == len(ids) {
		b.runs[n-1].msgs = append(b.runs[n-1].msgs, m)
		return
	}
	b.runs = append(b.runs, stormRun{roster: r, ids: ids, msgs: []Message{m}})
}

// recordStorm counts a message about to be stored (send path step 3).
// Failing to count never fails the send.
func (s *Service) recordStorm(ctx context.Context, conv string) {
	if s.storm == nil {
		return
	}
	// A cache hit: checkSend has just loaded the roster.
	r, err := s.rosters.get(ctx, s.store, conv)
	if err != nil || r.Kind != Group {
		return
	}
	now := time.Now()
	n, err := s.storm.cfg.Counter.Record(ctx, conv, now)
	if err != nil {
		s.log.Debug("storm window: record", "conv", conv, "err", err)
		return
	}
	s.obs.WindowCount(n)
	s.updateStorm(conv, n, now)
}

// updateStorm applies a fresh count of conv's window.
func (s *Service) updateStorm(conv string, count int, now time.Time) {
	m := s.storm
	m.mu.RLock()
	st := m.active[conv]
	if st != nil {
		st.count.Store(int64(count))
	}
	was := st != nil
	m.mu.RUnlock()
	if m.cfg.storming(was, count) == was {
		return
	}

	m.mu.Lock()
	st = m.active[conv]
	was = st != nil
	active := m.cfg.storming(was, count)
	if active == was { // another caller switched it meanwhile
		m.mu.Unlock()
		return
	}
	if active {
		st = &stormState{since: now}
		st.count.Store(int64(count))
		m.active[conv] = st
	} else {
		delete(m.active, conv)
	}
	c := stormChange{conv: conv, active: active, count: count, since: st.since, quiet: st.remote}
	select {
	case m.changes <- c:
	case <-s.stop:
	}
	m.mu.Unlock()
	if !c.quiet {
		s.alertStorm(c, now)
	}
}

// RemoteStorm follows a storm another process detected (its storm frame
// reached this process's members through the bus): this process's own
// messages of the group are then batched too, and it sends no frame or
// alert of its own for that storm.
func (s *Service) RemoteStorm(conv string, active bool, count int) {
	m := s.storm
	if m == nil {
		return
	}
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.active[conv]
	if active == (st != nil) {
		if st != nil {
			st.count.Store(int64(count))
		}
		return
	}
	if active {
		st = &stormState{since: now, remote: true}
		st.count.Store(int64(count))
		m.active[conv] = st
	} else {
		delete(m.active, conv)
	}
	select {
	case m.changes <- stormChange{conv: conv, active: active, count: count, since: st.since, quiet: true}:
	case <-s.stop:
	}
}

// alertStorm logs, counts and queues a storm transition.
func (s *Service) alertStorm(c stormChange, now time.Time) {
	cfg := &s.storm.cfg
	a := StormAlert{
		TS: now.UnixMilli(), Conv: c.conv, Count: c.count, Threshold: cfg.Threshold,
		WindowMS: cfg.Window.Milliseconds(), Since: c.since.UnixMilli(),
	}
	if c.active {
		a.Type = AlertStormStarted
		s.log.Warn("storm started", "conv", c.conv, "count", c.count, "threshold", cfg.Threshold, "window", cfg.Window)
		s.obs.StormStarted(c.conv, c.count)
	} else {
		a.Type = AlertStormEnded
		lasted := now.Sub(c.since)
		a.DurationMS = lasted.Milliseconds()
		s.log.Info("storm ended", "conv", c.conv, "count", c.count, "lower_mark", cfg.LowerMark, "lasted", lasted.Round(time.Millisecond))
		s.obs.StormEnded(c.conv, c.count, lasted)
	}
	s.publish(a)
}

// publish pushes an outbound event; it is best effort.
func (s *Service) publish(v any) {
	if s.cfg.Events == nil {
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		s.log.Error("encoding event", "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	dropped, err := s.cfg.Events.Push(ctx, EventsKey, b)
	s.obs.EventPushed(dropped, err)
	if err != nil {
		s.log.Warn("event queue: push", "err", err)
	}
}

// stormMonitor counts the storming groups again every stormCheckInterval:
// a storm ends when messages stop, when there is no send to notice it.
func (s *Service) stormMonitor() {
	defer s.wg.Done()
	t := time.NewTicker(stormCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			s.checkStorms()
		case <-s.stop:
			return
		}
	}
}

func (s *Service) checkStorms() {
	m := s.storm
	m.mu.RLock()
	convs := make([]string, 0, len(m.active))
	for conv := range m.active {
		convs = append(convs, conv)
	}
	m.mu.RUnlock()
	for _, conv := range convs {
		now := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		n, err := m.cfg.Counter.Count(ctx, conv, now)
		cancel()
		if err != nil {
			s.log.Debug("storm window: count", "conv", conv, "err", err)
			continue
		}
		s.updateStorm(conv, n, now)
	}
}

// bufferStorm takes m into its group's storm buffer when the group storms;
// it runs on the dispatcher.
func (s *Service) bufferStorm(r *cachedRoster, m *Message) bool {
	if s.storm == nil {
		return false
	}
	b := s.storm.bufs[m.Conv]
	if b == nil {
		return false
	}
	b.add(r, *m)
	return true
}

// switchStorm applies a transition on the dispatcher: from a start on,
// the group's messages are buffered; at the end what is buffered leaves
// before the end frame and before any later message.
func (s *Service) switchStorm(ctx context.Context, c stormChange) {
	m := s.storm
	if c.active {
		if m.bufs[c.conv] == nil {
			m.bufs[c.conv] = &stormBuffer{}
		}
	} else if b := m.bufs[c.conv]; b != nil {
		s.flushStorm(c.conv, b)
		delete(m.bufs, c.conv)
	}
	if c.quiet {
		return
	}
	r, err := s.rosters.get(ctx, s.store, c.conv)
	if err != nil {
		s.log.Warn("storm: roster", "conv", c.conv, "err", err)
		return
	}
	s.deliver.Deliver(r.ids, &Event{Type: EventStorm, Conv: c.conv, Active: c.active, Count: c.count, WindowMS: m.cfg.Window.Milliseconds()})
}

// flushStorms delivers what every storming group buffered since the last
// flush, one batch per group.
func (s *Service) flushStorms() {
	for conv, b := range s.storm.bufs {
		s.flushStorm(conv, b)
	}
}

func (s *Service) flushStorm(conv string, b *stormBuffer) {
	for _, run := range b.runs {
		s.deliver.Deliver(run.ids, &Event{Type: EventBatch, Conv: conv, Messages: run.msgs})
		s.obs.StormBatch(len(run.msgs))
	}
	b.runs = nil
}

// Storms lists the groups in storm mode, oldest storm first; admins only.
func (s *Service) Storms(ctx context.Context, me User) ([]Storm, error) {
	if !s.IsAdmin(me) {
		return nil, Errorf(EForbidden, "admins only")
	}
	out := []Storm{}
	if s.storm == nil {
		return out, nil
	}
	m := s.storm
	type entry struct {
		conv  string
		since time.Time
		count int
	}
	m.mu.RLock()
	list := make([]entry, 0, len(m.active))
	for conv, st := range m.active {
		list = append(list, entry{conv, st.since, int(st.count.Load())})
	}
	m.mu.RUnlock()
	sort.Slice(list, func(i, j int) bool { return list[i].since.Before(list[j].since) })
	now := time.Now()
	for _, e := range list {
		st := Storm{Conv: e.conv, Count: e.count, Since: e.since.UnixMilli()}
		if n, err := m.cfg.Counter.Count(ctx, e.conv, now); err == nil {
			st.Count = n
		}
		// The name is shared by every member's entry; any member's will do.
		if r, err := s.rosters.get(ctx, s.store, e.conv); err == nil && len(r.ids) > 0 {
			if c, err := s.store.Conversation(ctx, e.conv, r.ids[0]); err == nil {
				st.Name = c.Name
			}
		}
		out = append(out, st)
	}
	return out, nil
}

// IsAdmin reports whether u administers this server (config auth.admins;
// usernames are unique ignoring case).
func (s *Service) IsAdmin(u User) bool {
	for _, name := range s.cfg.Admins {
		if u.Username != "" && strings.EqualFold(name, u.Username) {
			return true
		}
	}
	return false
}
