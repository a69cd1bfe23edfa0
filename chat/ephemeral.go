package chat

import (
	"context"
	"sync"
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

// Contacts returns the users who share a conversation with user now.
func (s *Service) Contacts(ctx context.Context, user string) ([]string, error) {
	return s.store.Contacts(ctx, user)
}

// Presence tells user's contacts that it came online or went offline.
func (s *Service) Presence(ctx context.Context, user string, online bool) error {
	to, err := s.store.Contacts(ctx, user)
	if err != nil || len(to) == 0 {
		return err
	}
	s.deliver.Deliver(to, &Event{Type: EventPresence, User: user, Active: online})
	return nil
}
