package chat

import (
	"context"
	"sync"
)

// rosterCache keeps the current members of recently used conversations, so
// that a send checks membership and fans out without a query. Every
// membership change goes through a Service, which drops the entry; a
// change made by another process is seen by fan-out as soon as a message
// committed after it is (Roster.Version), and by this cache when the news
// comes over the bus.
type rosterCache struct {
	mu sync.RWMutex
	m  map[string]*cachedRoster
	// gen counts forgets: a load that began before a forget must not put
	// the roster it read back into the cache (it may predate a kick).
	gen uint64
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
	return &rosterCache{m: make(map[string]*cachedRoster)}
}

// maxCachedRosters bounds the cache; past it the cache starts over, which
// costs one query per conversation and keeps memory flat.
const maxCachedRosters = 50_000

func (c *rosterCache) get(ctx context.Context, store ConversationStore, conv string) (*cachedRoster, error) {
	if !storable(conv) {
		return nil, errNoSuch
	}
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
		if len(c.m) >= maxCachedRosters {
			c.m = make(map[string]*cachedRoster)
		}
		c.m[conv] = r
		c.mu.Unlock()
		return r, nil
	}
}

// forget drops conv's entry; "" drops every entry.
func (c *rosterCache) forget(conv string) {
	if conv == "" {
		c.clear()
		return
	}
	c.mu.Lock()
	c.gen++
	delete(c.m, conv)
	c.mu.Unlock()
}

func (c *rosterCache) clear() {
	c.mu.Lock()
	c.gen++
	c.m = make(map[string]*cachedRoster)
	c.mu.Unlock()
}
