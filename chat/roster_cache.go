package chat

import (
	"context"
	"sync"
)

// rosterCache keeps the current members of recently used conversations, so
// that a send checks membership and fans out without a query. Every
// membership change goes through the Service, which drops the entry.
type rosterCache struct {
	mu sync.RWMutex
	m  map[string]*cachedRoster
	// gen counts forgets: a load that began before a forget must not put
	// the roster it read back into the cache (it may predate a kick).
	gen uint64
	// changing counts the membership changes of each conversation ("":
	// of any) that are being committed. The writer goes on committing
	// messages after a kick, and their fan-out may run before the kick's
	// caller is back to forget the entry: meanwhile no entry is kept, so
	// that every fan-out in this process reads the members as committed,
	// never a list that still holds the kicked member (PROTOCOL guarantee
	// 4; other processes: Service.changeMembers).
	changing map[string]int
}

type cachedRoster struct {
	Roster
	roles map[string]string
	ids   []string
	// latestJoin is the largest MinSeq of the members: messages from it on
	// go to everyone, older ones only to members who could see them.
	latestJoin int64
}

// recipients lists the members allowed to see seq.
func (r *cachedRoster) recipients(seq int64) []string {
	if seq >= r.latestJoin {
		return r.ids
	}
	ids := make([]string, 0, len(r.ids))
	for _, m := range r.Members {
		if m.MinSeq <= seq {
			ids = append(ids, m.UserID)
		}
	}
	return ids
}

// splitTarget divides the recipients of a mutation at seq of target
// between the members who can see the target and those who joined after
// it (who get it redacted).
func (r *cachedRoster) splitTarget(seq, target int64) (see, blind []string) {
	for _, m := range r.Members {
		switch {
		case m.MinSeq > seq:
		case m.MinSeq <= target:
			see = append(see, m.UserID)
		default:
			blind = append(blind, m.UserID)
		}
	}
	return see, blind
}

func newRosterCache() *rosterCache {
	return &rosterCache{m: make(map[string]*cachedRoster), changing: make(map[string]int)}
}

// maxCachedRosters bounds the cache; past it the cache starts over, which
// costs one query per conversation and keeps memory flat.
const maxCachedRosters = 50_000

func (c *rosterCache) get(ctx context.Context, store ConversationStore, conv string) (*cachedRoster, error) {
	for {
		c.mu.RLock()
		r, gen := c.m[conv], c.gen
		c.mu.RUnlock()
		if r != nil {
			return r, nil
		}
		ro, err := store.Roster(ctx, conv)
		if err != nil {
			return nil, err
		}
		r = &cachedRoster{Roster: ro, roles: make(map[string]string, len(ro.Members)), ids: ro.UserIDs()}
		for _, m := range ro.Members {
			r.roles[m.UserID] = m.Role
			r.latestJoin = max(r.latestJoin, m.MinSeq)
		}
		c.mu.Lock()
		if c.gen != gen {
			// A membership change committed while we read: read again.
			c.mu.Unlock()
			continue
		}
		if c.changing[conv] > 0 || c.changing[""] > 0 {
			c.mu.Unlock()
			return r, nil // read after every commit before it; not kept
		}
		if len(c.m) >= maxCachedRosters {
			c.m = make(map[string]*cachedRoster)
		}
		c.m[conv] = r
		c.mu.Unlock()
		return r, nil
	}
}

// begin says that a membership change of conv ("": of any conversation)
// is about to be committed: its entry is dropped and none is kept until
// end.
func (c *rosterCache) begin(conv string) {
	c.mu.Lock()
	c.changing[conv]++
	c.dropLocked(conv)
	c.mu.Unlock()
}

// end says that the change begun for conv was committed (or failed), and
// drops the entry again, in the same critical section: a load that read
// the members before the commit must not be kept in between.
func (c *rosterCache) end(conv string) {
	c.mu.Lock()
	if c.changing[conv]--; c.changing[conv] <= 0 {
		delete(c.changing, conv)
	}
	c.dropLocked(conv)
	c.mu.Unlock()
}

// forget drops conv's entry; "" drops every entry.
func (c *rosterCache) forget(conv string) {
	c.mu.Lock()
	c.dropLocked(conv)
	c.mu.Unlock()
}

// dropLocked drops conv's entry ("": every entry) and makes loads that
// began before read again.
func (c *rosterCache) dropLocked(conv string) {
	c.gen++
	if conv == "" {
		c.m = make(map[string]*cachedRoster)
		return
	}
	delete(c.m, conv)
}
