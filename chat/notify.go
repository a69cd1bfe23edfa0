package chat

import (
	"context"
	"sync"
	"time"
	"unicode/utf8"
)

// MuteForever is the muted_until of a conversation muted until unmuted:
// the last millisecond of year 9999, so that "muted_until > now" is the
// one test clients need.
const MuteForever int64 = 253402300799999

// PushSubscription is a browser's Web Push subscription (its push service
// endpoint and the keys that encrypt for it).
type PushSubscription struct {
	UserID    string `json:"-"`
	Endpoint  string `json:"endpoint"`
	P256dh    string `json:"p256dh"`
	Auth      string `json:"auth"`
	CreatedAt int64  `json:"created_at"`
}

// NotifyStore keeps what notifications need: mutes, push subscriptions,
// and server settings (the VAPID keys).
type NotifyStore interface {
	// SetMute sets user's muted_until of conv (0 unmutes) and gives the
	// entry a new version; ENotMember when user never joined.
	SetMute(ctx context.Context, conv, user string, until int64) error
	// AddPushSubscription stores sub; an endpoint already stored moves to
	// sub's user with the new keys.
	AddPushSubscription(ctx context.Context, sub PushSubscription) error
	// DeletePushSubscription removes user's subscription with endpoint,
	// if any; user "" removes it whoever holds it.
	DeletePushSubscription(ctx context.Context, user, endpoint string) error
	PushSubscriptions(ctx context.Context, user string) ([]PushSubscription, error)
	// InitSetting stores value under name unless a value is there, and
	// returns the value stored: the first writer wins, so processes
	// sharing a database agree.
	InitSetting(ctx context.Context, name string, value []byte) ([]byte, error)
}

// Notification is what a push tells a browser; the service worker shows
// it and opens conv on a click.
type Notification struct {
	Conv     string `json:"conv"`
	FromName string `json:"from_name"`
	Preview  string `json:"preview,omitempty"`
	Seq      int64  `json:"seq"`
}

// Pusher sends notifications to push services. Push must not block: it
// queues (bounded) and reports subscriptions that are gone by calling
// Service.DropPushSubscription.
type Pusher interface {
	Push(sub PushSubscription, n Notification)
}

// PushConfig sets when users are pushed.
type PushConfig struct {
	// Sender sends; nil turns notifications off.
	Sender Pusher
	// Delay is how long a message may stay unread before it is pushed;
	// also the shortest time between two pushes of one conversation.
	Delay time.Duration
	// Preview puts the start of the message in the push.
	Preview bool
}

// previewRunes bounds a preview: a notification shows a line or two.
const previewRunes = 120

// Mute mutes conv for me until untilMS (0: until unmuted).
func (s *Service) Mute(ctx context.Context, me, conv string, untilMS int64) error {
	if untilMS < 0 || (untilMS > 0 && untilMS <= time.Now().UnixMilli()) {
		return Errorf(EBadRequest, "until_ms must be 0 (until unmuted) or a time in the future")
	}
	if untilMS == 0 || untilMS > MuteForever {
		untilMS = MuteForever
	}
	return s.setMute(ctx, me, conv, untilMS)
}

// Unmute ends a mute of conv.
func (s *Service) Unmute(ctx context.Context, me, conv string) error {
	return s.setMute(ctx, me, conv, 0)
}

func (s *Service) setMute(ctx context.Context, me, conv string, until int64) error {
	if err := s.store.SetMute(ctx, conv, me, until); err != nil {
		return err
	}
	// Other devices show the bell too.
	s.notifyEntries(ctx, conv, []string{me})
	return nil
}

// SubscribePush stores a checked subscription of me.
func (s *Service) SubscribePush(ctx context.Context, me string, sub PushSubscription) error {
	sub.UserID = me
	sub.CreatedAt = time.Now().UnixMilli()
	return s.store.AddPushSubscription(ctx, sub)
}

// UnsubscribePush removes my subscription with endpoint.
func (s *Service) UnsubscribePush(ctx context.Context, me, endpoint string) error {
	return s.store.DeletePushSubscription(ctx, me, endpoint)
}

// DropPushSubscription removes a subscription its push service said is
// gone (404/410).
func (s *Service) DropPushSubscription(ctx context.Context, endpoint string) error {
	return s.store.DeletePushSubscription(ctx, "", endpoint)
}

// InitSetting is NotifyStore.InitSetting, for the server's secrets.
func (s *Service) InitSetting(ctx context.Context, name string, value []byte) ([]byte, error) {
	return s.store.InitSetting(ctx, name, value)
}

// notifier decides whom to push. A message that should be pushed starts a
// timer per (user, conversation); messages arriving while it runs only
// replace the one it will show (collapsing), and when it fires the user's
// read marker and mute are read fresh: a read before the delay cancels the
// push. Only the process that committed a message sees it here, so with
// several processes a message is pushed once; the collapsing is per
// process.
type notifier struct {
	s   *Service
	cfg PushConfig

	mu      sync.Mutex
	pending map[pushKey]*pendingPush
	last    map[pushKey]time.Time // when each key was last pushed
	closed  bool
	running sync.WaitGroup
}

type pushKey struct{ user, conv string }

type pendingPush struct {
	msg   Message  // the newest: what the push shows
	sent  []sentAt // the collapsed messages, ascending
	timer *time.Timer
}

// sentAt is when a collapsed message was sent.
type sentAt struct{ seq, ts int64 }

func newNotifier(s *Service, cfg PushConfig) *notifier {
	if cfg.Sender == nil {
		return nil
	}
	if cfg.Delay <= 0 {
		cfg.Delay = 10 * time.Second
	}
	return &notifier{s: s, cfg: cfg, pending: make(map[pushKey]*pendingPush), last: make(map[pushKey]time.Time)}
}

// observe looks at committed messages of one conversation whose roster is
// r.
func (n *notifier) observe(msgs []Message, r *cachedRoster) {
	for i := range msgs {
		m := &msgs[i]
		if m.Kind != KindText {
			continue
		}
		for _, u := range pushTargets(m, r) {
			n.schedule(u, *m)
		}
	}
}

// pushTargets are the users a message may be pushed to: the other member
// of a direct conversation, or the members it mentions; never its sender.
func pushTargets(m *Message, r *cachedRoster) []string {
	if r.Kind == Direct {
		var out []string
		for _, id := range r.ids {
			if id != m.From {
				out = append(out, id)
			}
		}
		return out
	}
	var out []string
	for _, id := range mentionsOf(m) {
		if id != m.From && r.Has(id) {
			out = append(out, id)
		}
	}
	return out
}

func (n *notifier) schedule(user string, m Message) {
	key := pushKey{user, m.Conv}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	if p := n.pending[key]; p != nil {
		if m.Seq > p.msg.Seq {
			p.msg = m
			p.sent = append(p.sent, sentAt{m.Seq, m.TS})
		}
		return
	}
	now := time.Now()
	due := time.UnixMilli(m.TS).Add(n.cfg.Delay)
	if next := n.last[key].Add(n.cfg.Delay); next.After(due) {
		due = next
	}
	if len(n.last) > 100_000 {
		for k, t := range n.last {
			if now.Sub(t) > n.cfg.Delay {
				delete(n.last, k)
			}
		}
	}
	p := &pendingPush{msg: m, sent: []sentAt{{m.Seq, m.TS}}}
	n.pending[key] = p
	n.arm(key, p, due.Sub(now))
}

// arm starts p's timer (under n.mu).
func (n *notifier) arm(key pushKey, p *pendingPush, d time.Duration) {
	n.running.Add(1)
	p.timer = time.AfterFunc(d, func() {
		defer n.running.Done()
		n.fire(key)
	})
}

// fire decides a pending push once its delay has passed. The user's read
// marker, read now, may cover some of the collapsed messages: the oldest
// one it does not cover must itself be Delay old before anything is
// pushed (a message read in time says nothing of the next one, sent a
// moment before the timer fired), so the timer may be armed again.
func (n *notifier) fire(key pushKey) {
	n.mu.Lock()
	p := n.pending[key]
	closed := n.closed
	n.mu.Unlock()
	if p == nil || closed {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := n.s.store.Conversation(ctx, key.conv, key.user)
	n.mu.Lock()
	if n.closed || n.pending[key] != p {
		n.mu.Unlock()
		return
	}
	if err == nil {
		for len(p.sent) > 0 && p.sent[0].seq <= c.ReadSeq {
			p.sent = p.sent[1:]
		}
		if len(p.sent) > 0 {
			if wait := time.Until(time.UnixMilli(p.sent[0].ts).Add(n.cfg.Delay)); wait > 0 {
				n.arm(key, p, wait)
				n.mu.Unlock()
				return
			}
		}
	}
	delete(n.pending, key)
	due := err == nil && len(p.sent) > 0 // something unread is Delay old
	if due {
		n.last[key] = time.Now()
	}
	n.mu.Unlock()
	if due {
		err = n.push(ctx, key.user, p.msg, c)
	}
	if err != nil {
		n.s.log.Warn("push notification", "user", key.user, "conv", key.conv, "err", err)
	}
}

// push sends m to user's subscriptions unless c, user's entry read at
// the timer's end, says it need not.
func (n *notifier) push(ctx context.Context, user string, m Message, c Conversation) error {
	if c.Left || c.ReadSeq >= m.Seq || c.MutedUntil > time.Now().UnixMilli() {
		return nil
	}
	subs, err := n.s.store.PushSubscriptions(ctx, user)
	if err != nil || len(subs) == 0 {
		return err
	}
	from, err := n.s.store.UserByID(ctx, m.From)
	if err != nil {
		from = User{DisplayName: "someone"}
	}
	note := Notification{Conv: m.Conv, FromName: from.DisplayName, Seq: m.Seq}
	if n.cfg.Preview {
		note.Preview = preview(m.Body)
	}
	for _, sub := range subs {
		n.cfg.Sender.Push(sub, note)
	}
	return nil
}

func preview(body string) string {
	if utf8.RuneCountInString(body) <= previewRunes {
		return body
	}
	r := []rune(body)
	return string(r[:previewRunes-1]) + "…"
}

// close stops the timers and waits for pushes being decided.
func (n *notifier) close() {
	n.mu.Lock()
	n.closed = true
	for k, p := range n.pending {
		if p.timer.Stop() {
			n.running.Done()
		}
		delete(n.pending, k)
	}
	n.mu.Unlock()
	n.running.Wait()
}
