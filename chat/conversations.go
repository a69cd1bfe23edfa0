package chat

import (
	"context"
	"slices"
	"strings"
	"unicode/utf8"
)

const (
	maxGroupNameLen = 128
	maxGroupMembers = 10_000
)

// CreateDirect returns the direct conversation between me and peer, creating
// it the first time; created says which.
func (s *Service) CreateDirect(ctx context.Context, me, peer string) (Conversation, bool, error) {
	if peer == "" {
		return Conversation{}, false, Errorf(EBadRequest, "user_id is required")
	}
	if peer == me {
		return Conversation{}, false, Errorf(EBadRequest, "a direct conversation needs another user")
	}
	if !storable(peer) {
		return Conversation{}, false, errNoSuch
	}
	if _, err := s.store.UserByID(ctx, peer); err != nil {
		return Conversation{}, false, err
	}
	pair := []string{me, peer}
	id, created, err := s.store.CreateDirect(ctx, NewID(), me, peer)
	if err != nil {
		return Conversation{}, false, err
	}
	if created {
		s.notifyEntries(ctx, id, pair)
		s.introduce(ctx, id, pair)
	}
	c, err := s.Conversation(ctx, me, id)
	return c, created, err
}

// CreateGroup creates a group owned by me.
func (s *Service) CreateGroup(ctx context.Context, me, name string, members []string) (Conversation, error) {
	name, err := groupName(name)
	if err != nil {
		return Conversation{}, err
	}
	ids, err := s.existingUsers(ctx, members, me)
	if err != nil {
		return Conversation{}, err
	}
	id := NewID()
	if err := s.store.CreateGroup(ctx, id, name, me, ids); err != nil {
		return Conversation{}, err
	}
	everyone := append([]string{me}, ids...)
	s.notifyEntries(ctx, id, everyone)
	s.introduce(ctx, id, everyone)
	return s.Conversation(ctx, me, id)
}

// groupName is name trimmed, or a bad_request when that is no group name.
func groupName(name string) (string, error) {
	name = strings.TrimSpace(name)
	if name == "" || utf8.RuneCountInString(name) > maxGroupNameLen || !storable(name) {
		return "", Errorf(EBadRequest, "name must be 1-%d characters of UTF-8, without NUL", maxGroupNameLen)
	}
	return name, nil
}

// RenameGroup gives a group a new name (owner and admins) and returns my
// entry; every member's sessions get their changed entry.
func (s *Service) RenameGroup(ctx context.Context, me, conv, name string) (Conversation, error) {
	r, err := s.member(ctx, conv, me)
	if err != nil {
		return Conversation{}, err
	}
	if r.Kind != Group {
		return Conversation{}, Errorf(EBadRequest, "only groups have names")
	}
	if name, err = groupName(name); err != nil {
		return Conversation{}, err
	}
	if err := CheckRename(r.roles[me]); err != nil {
		return Conversation{}, err
	}
	if err := s.store.RenameGroup(ctx, conv, me, name); err != nil {
		return Conversation{}, err
	}
	// The members as they stand after the rename (the cached list may
	// lag a change made on another process) hear of it.
	if now, err := s.store.Roster(ctx, conv); err == nil {
		s.notifyEntries(ctx, conv, now.UserIDs())
	}
	return s.Conversation(ctx, me, conv)
}

// existingUsers dedups ids, drops except, and checks that each user exists.
func (s *Service) existingUsers(ctx context.Context, ids []string, except string) ([]string, error) {
	if len(ids) > maxGroupMembers {
		return nil, Errorf(ETooLarge, "at most %d members", maxGroupMembers)
	}
	seen := make(map[string]bool, len(ids))
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if id == "" {
			return nil, Errorf(EBadRequest, "empty user id")
		}
		if id == except || seen[id] {
			continue
		}
		seen[id] = true
		if !storable(id) {
			return nil, Errorf(ENotFound, "user %q not found", id)
		}
		if _, err := s.store.UserByID(ctx, id); err != nil {
			if ErrorCode(err) == ENotFound {
				return nil, Errorf(ENotFound, "user %q not found", id)
			}
			return nil, err
		}
		out = append(out, id)
	}
	return out, nil
}

// member returns my membership of conv, failing unless I am a current member.
func (s *Service) member(ctx context.Context, conv, me string) (*cachedRoster, error) {
	r, err := s.rosters.get(ctx, s.store, conv)
	if err != nil {
		return nil, err
	}
	if _, ok := r.roles[me]; !ok {
		return nil, Errorf(ENotMember, "not a member of this conversation")
	}
	return r, nil
}

// AddMembers adds users to a group; any member may add. Users already in the
// group are skipped. A new member sees only messages sent after it joined.
func (s *Service) AddMembers(ctx context.Context, me, conv string, users []string) ([]string, error) {
	r, err := s.member(ctx, conv, me)
	if err != nil {
		return nil, err
	}
	if r.Kind != Group {
		return nil, Errorf(EBadRequest, "members can only be added to groups")
	}
	if len(users) == 0 {
		return nil, Errorf(EBadRequest, "user_ids is required")
	}
	ids, err := s.existingUsers(ctx, users, "")
	if err != nil {
		return nil, err
	}
	added, err := s.store.AddMembers(ctx, conv, ids)
	s.membershipChanged(conv)
	if err != nil {
		return nil, err
	}
	if len(added) == 0 {
		return added, nil // nobody new: no entry changed
	}
	// The members before them see the new count on their entries.
	s.notifyEntries(ctx, conv, s.withMembers(ctx, conv, added))
	s.introduce(ctx, conv, added)
	return added, nil
}

// withMembers is users and the current members of conv online now, each
// once: after a membership change every member's entry shows a new
// members_count. Those offline find the change by its version when they
// sync, so their entries are not read for nothing.
func (s *Service) withMembers(ctx context.Context, conv string, users []string) []string {
	r, err := s.rosters.get(ctx, s.store, conv)
	if err != nil {
		return users
	}
	others := r.ids
	if f := s.online.f.Load(); f != nil {
		others = (*f)(ctx, r.ids)
	}
	out := append([]string(nil), users...)
	for _, id := range others {
		if !slices.Contains(users, id) {
			out = append(out, id)
		}
	}
	return out
}

// Kick ends user's membership; owners may kick anyone, admins only members.
func (s *Service) Kick(ctx context.Context, me, conv, user string) error {
	if user == me {
		return s.Leave(ctx, me, conv)
	}
	r, err := s.member(ctx, conv, me)
	if err != nil {
		return err
	}
	if r.Kind != Group {
		return Errorf(EBadRequest, "nobody can be removed from a direct conversation")
	}
	target, ok := r.roles[user]
	if !ok {
		return Errorf(ENotFound, "user is not a member")
	}
	if err := CheckRemove(r.roles[me], target); err != nil {
		return err
	}
	err = s.store.KickMember(ctx, conv, me, user)
	s.membershipChanged(conv)
	if err != nil {
		return err
	}
	s.notifyEntries(ctx, conv, s.withMembers(ctx, conv, []string{user}))
	return nil
}

// SetRole changes a group member's role; only the owner may. Making
// another member owner hands the group over: the old owner becomes an
// admin, so a group keeps exactly one owner. Giving a member the role it
// has changes nothing and is not an error.
func (s *Service) SetRole(ctx context.Context, me, conv, user, role string) error {
	r, err := s.member(ctx, conv, me)
	if err != nil {
		return err
	}
	if r.Kind != Group {
		return Errorf(EBadRequest, "only groups have roles")
	}
	if err := CheckSetRole(me, r.roles[me], user, role); err != nil {
		return err
	}
	current, ok := r.roles[user]
	if !ok {
		return Errorf(ENotFound, "user is not a member")
	}
	if current == role {
		return nil
	}
	err = s.store.SetRole(ctx, conv, me, user, role)
	s.membershipChanged(conv)
	if err != nil {
		return err
	}
	changed := []string{user}
	if role == RoleOwner {
		changed = append(changed, me)
	}
	s.notifyEntries(ctx, conv, changed)
	return nil
}

// Leave ends my own membership of a group.
func (s *Service) Leave(ctx context.Context, me, conv string) error {
	r, err := s.member(ctx, conv, me)
	if err != nil {
		return err
	}
	if r.Kind != Group {
		return Errorf(EBadRequest, "a direct conversation cannot be left")
	}
	err = s.store.RemoveMember(ctx, conv, me)
	s.membershipChanged(conv)
	if err != nil {
		return err
	}
	// Every member's entry changed: its members_count, and when I was the
	// owner, the role of the member the store made owner.
	s.notifyEntries(ctx, conv, s.withMembers(ctx, conv, []string{me}))
	return nil
}

// Clear hides everything sent so far from me.
func (s *Service) Clear(ctx context.Context, me, conv string) error {
	if _, err := s.store.Membership(ctx, conv, me); err != nil {
		return err
	}
	err := s.store.ClearHistory(ctx, conv, me)
	s.membershipChanged(conv) // fan-out must see my new min_seq
	if err != nil {
		return err
	}
	s.notifyEntries(ctx, conv, []string{me})
	return nil
}

// Conversation returns my entry of conv, also after I left it.
func (s *Service) Conversation(ctx context.Context, me, conv string) (Conversation, error) {
	// Pending acks are read before the store (here and below): an ack
	// flush that commits in between is then seen by one or the other, so
	// a shown ack never moves back.
	if !storable(conv) {
		return Conversation{}, errNoSuch
	}
	pending := s.acks.pending(conv, me)
	c, err := s.store.Conversation(ctx, conv, me)
	if err != nil {
		return Conversation{}, err
	}
	overlayAck(&c, pending)
	return c, nil
}

// Members lists the current members of a conversation I am in.
func (s *Service) Members(ctx context.Context, me, conv string) ([]Member, error) {
	cached, err := s.member(ctx, conv, me)
	if err != nil {
		return nil, err
	}
	pending := make(map[string]int64, len(cached.ids))
	for _, id := range cached.ids {
		pending[id] = s.acks.pending(conv, id)
	}
	r, err := s.store.Roster(ctx, conv)
	if err != nil {
		return nil, err
	}
	// Pending acks are not clamped yet: clamp them to max_seq as the flush
	// will.
	c, err := s.store.Conversation(ctx, conv, me)
	if err != nil {
		return nil, err
	}
	for i := range r.Members {
		m := &r.Members[i]
		p, ok := pending[m.UserID]
		if !ok {
			p = s.acks.pending(conv, m.UserID)
		}
		if p = min(p, c.MaxSeq); p > m.LastAckSeq {
			m.LastAckSeq = p
		}
	}
	return r.Members, nil
}

// Changes returns my conversation entries changed after version since.
func (s *Service) Changes(ctx context.Context, me string, since int64, limit int) (Changes, error) {
	if since < 0 {
		return Changes{}, Errorf(EBadRequest, "since must be >= 0")
	}
	limit = clampLimit(limit)
	pending := s.acks.pendingOf(me)
	ch, err := s.store.ConversationsSince(ctx, me, since, limit)
	if err != nil {
		return Changes{}, err
	}
	for i := range ch.Conversations {
		overlayAck(&ch.Conversations[i], pending[ch.Conversations[i].ID])
	}
	return ch, nil
}

// MaxVersion returns the largest version of my conversation set.
func (s *Service) MaxVersion(ctx context.Context, me string) (int64, error) {
	return s.store.MaxVersion(ctx, me)
}

func clampLimit(limit int) int {
	if limit <= 0 {
		return DefaultPageLimit
	}
	if limit > MaxPageLimit {
		return MaxPageLimit
	}
	return limit
}

// overlayAck shows acks still waiting in memory, so a client reads back
// what it acked.
func overlayAck(c *Conversation, pending int64) {
	if p := min(pending, c.MaxSeq); p > c.LastAckSeq {
		c.LastAckSeq = p
	}
}

// notifyEntries sends each user its own new entry of conv.
func (s *Service) notifyEntries(ctx context.Context, conv string, users []string) {
	for _, u := range users {
		c, err := s.Conversation(ctx, u, conv)
		if err != nil {
			s.log.Warn("conversation entry for notification", "conv", conv, "user", u, "err", err)
			continue
		}
		s.deliver.Deliver([]string{u}, &Event{Type: EventConversation, Conv: conv, Conversation: &c})
	}
}
