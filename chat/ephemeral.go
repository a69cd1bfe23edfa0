package chat

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Typing and presence are ephemeral: relayed to whoever is online now,
// never stored.

// Event types of v1.1.
const (
	EventTyping   = "typing"
	EventPresence = "presence"
)

// TypingInterval is the least time between two typing events of one user
// in one conversation; those in between are dropped.
const TypingInterval = 3 * time.Second

// typingLimiter remembers when each (user, conversation) last typed.
type typingLimiter struct {
	mu   sync.Mutex
	last map[[2]string]time.Time
}

// allow reports whether a typing event of user in conv may go out now.
func (l *typingLimiter) allow(user, conv string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil {
		l.last = make(map[[2]string]time.Time)
	}
	k := [2]string{user, conv}
	if t, ok := l.last[k]; ok && now.Sub(t) < TypingInterval {
		return false
	}
	if len(l.last) >= 100_000 {
		// Bounded: drop what is past its interval anyway.
		for k, t := range l.last {
			if now.Sub(t) >= TypingInterval {
				delete(l.last, k)
			}
		}
	}
	l.last[k] = now
	return true
}

// Typing relays that user is typing in conv to the conversation's other
// members online. A typist who is not a member, or who typed less than
// TypingInterval ago, is dropped silently: typing is a hint, not a request.
func (s *Service) Typing(ctx context.Context, user, conv string) {
	r, err := s.rosters.get(ctx, s.store, conv)
	if err != nil {
		return
	}
	if _, ok := r.roles[user]; !ok || !s.typing.allow(user, conv, time.Now()) {
		return
	}
	to := make([]string, 0, len(r.ids))
	for _, id := range r.ids {
		if id != user {
			to = append(to, id)
		}
	}
	s.deliver.Deliver(to, &Event{Type: EventTyping, Conv: conv, User: user})
}

// RemoteTyping takes a typing event another process relayed (the bus)
// into this process's limit and reports whether to deliver it here: the
// limit is per user and conversation, whichever processes hold the
// user's sessions. Two events let out by two processes at the same time
// cross on the bus and each is dropped by the other process: every
// member still hears one.
func (s *Service) RemoteTyping(user, conv string) bool {
	return s.typing.allow(user, conv, time.Now())
}

// Contacts returns the users who share a conversation with user now.
func (s *Service) Contacts(ctx context.Context, user string) ([]string, error) {
	return s.store.Contacts(ctx, user, "")
}

// Presence tells user's contacts that it came online or went offline.
// "Offline" also goes to the members of conversations user has left or
// was removed from: they may have been told it was online (a deleted
// account's direct conversations stay in its contacts' lists), and would
// show it online until they reconnect.
func (s *Service) Presence(ctx context.Context, user string, online bool) error {
	var to []string
	var err error
	if online {
		to, err = s.store.Contacts(ctx, user, "")
	} else {
		to, err = s.store.ContactsEver(ctx, user)
	}
	if err != nil || len(to) == 0 {
		return err
	}
	s.deliver.Deliver(to, &Event{Type: EventPresence, User: user, Active: online})
	return nil
}

// OnlineFunc reports which of users are online now.
type OnlineFunc func(ctx context.Context, users []string) []string

// onlineHook holds the transport's OnlineFunc: who is online is known where
// the sessions are, and the service is made before them.
type onlineHook struct{ f atomic.Pointer[OnlineFunc] }

// SetOnline tells the service who is online, so that people who become
// contacts hear of each other at once.
func (s *Service) SetOnline(f OnlineFunc) { s.online.f.Store(&f) }

// introduce tells the members of conv who were just added and those who
// were there which of each other are online. Presence otherwise reaches
// only contacts when someone comes or goes, so two people online who
// become contacts would see each other offline until one reconnects.
// Two who shared another conversation already were contacts, told when
// each came online: they are not told again.
func (s *Service) introduce(ctx context.Context, conv string, added []string) {
	f := s.online.f.Load()
	if f == nil || len(added) == 0 {
		return
	}
	r, err := s.rosters.get(ctx, s.store, conv)
	if err != nil {
		return
	}
	fresh := make(map[string]bool, len(added))
	for _, u := range added {
		fresh[u] = true
	}
	online := (*f)(ctx, r.ids)
	// Whom each newcomer online knew from elsewhere (knowing is mutual; a
	// newcomer offline is told nothing anyway).
	known := map[string]map[string]bool{}
	for _, u := range online {
		if !fresh[u] {
			continue
		}
		cs, err := s.store.Contacts(ctx, u, conv)
		if err != nil {
			continue
		}
		known[u] = make(map[string]bool, len(cs))
		for _, c := range cs {
			known[u][c] = true
		}
	}
	for _, u := range online {
		// A newcomer is news to everyone else; one who was there is news
		// only to the newcomers.
		pool := added
		if fresh[u] {
			pool = r.ids
		}
		to := make([]string, 0, len(pool))
		for _, v := range pool {
			if v != u && !known[u][v] && !known[v][u] {
				to = append(to, v)
			}
		}
		if len(to) > 0 {
			s.deliver.Deliver(to, &Event{Type: EventPresence, User: u, Active: true})
		}
	}
}
