package storage

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
)

// Integer keys (migration 0006). The messages table is keyed by integers,
// not by the 20-character text ids of conversations and users: a message
// row and its dedup-index entry are 40 bytes shorter each way, and the
// comparisons of every look-up are integer ones. The text ids stay the
// public ones. The ids table gives each text id (of a conversation or a
// user: chat.NewID makes them unique across both) its key for good: rows
// are never deleted, not even with the user (a deleted account's messages
// stay and still name it), so a key is never handed out again, and
// INTEGER PRIMARY KEY makes it the table's b-tree key, which VACUUM keeps.
//
// Both directions are immutable once committed, so the store keeps them in
// memory (keyCache). The writer makes keys lazily, the first time a
// message needs one; a key it makes or reads inside its transaction may
// not be committed yet (a rollback frees it for another id), so the
// transaction keeps its own map and hands it to the cache after COMMIT.

// keyCache maps text ids to keys and back: only committed pairs.
type keyCache struct {
	mu    sync.RWMutex
	byID  map[string]int64
	byKey map[int64]string
}

func newKeyCache() *keyCache {
	return &keyCache{byID: make(map[string]int64), byKey: make(map[int64]string)}
}

func (c *keyCache) key(id string) (int64, bool) {
	c.mu.RLock()
	k, ok := c.byID[id]
	c.mu.RUnlock()
	return k, ok
}

func (c *keyCache) id(key int64) (string, bool) {
	c.mu.RLock()
	id, ok := c.byKey[key]
	c.mu.RUnlock()
	return id, ok
}

func (c *keyCache) add(id string, key int64) {
	c.mu.Lock()
	c.byID[id] = key
	c.byKey[key] = id
	c.mu.Unlock()
}

// addAll adds the pairs a transaction made or read, once it committed.
func (c *keyCache) addAll(m map[string]int64) {
	if len(m) == 0 {
		return
	}
	c.mu.Lock()
	for id, k := range m {
		c.byID[id] = k
		c.byKey[k] = id
	}
	c.mu.Unlock()
}

// noKey stands for an id that has no key yet: nothing stored refers to it,
// so a look-up by it finds no rows.
const noKey int64 = 0

// key returns id's key inside the writer's transaction, making one when
// create is set and there is none.
func (t *wtx) key(id string, create bool) (int64, error) {
	if k, ok := t.w.keys.key(id); ok {
		return k, nil
	}
	if k, ok := t.keys[id]; ok {
		return k, nil
	}
	find, err := t.stmt(`SELECT key FROM ids WHERE id = ?`)
	if err != nil {
		return 0, err
	}
	var k int64
	err = find.QueryRowContext(t.ctx, id).Scan(&k)
	if errors.Is(err, sql.ErrNoRows) {
		if !create {
			return noKey, nil
		}
		ins, err := t.stmt(`INSERT INTO ids (id) VALUES (?) RETURNING key`)
		if err != nil {
			return 0, err
		}
		if err := ins.QueryRowContext(t.ctx, id).Scan(&k); err != nil {
			return 0, fmt.Errorf("key of %q: %w", id, err)
		}
	} else if err != nil {
		return 0, err
	}
	if t.keys == nil {
		t.keys = make(map[string]int64)
	}
	t.keys[id] = k
	return k, nil
}

// lookupKey returns id's key as a reader sees it (committed), noKey for
// an id nothing refers to.
func (db *DB) lookupKey(ctx context.Context, q queryRower, id string) (int64, error) {
	if k, ok := db.keys.key(id); ok {
		return k, nil
	}
	var k int64
	err := q.QueryRowContext(ctx, `SELECT key FROM ids WHERE id = ?`, id).Scan(&k)
	if errors.Is(err, sql.ErrNoRows) {
		return noKey, nil
	} else if err != nil {
		return 0, err
	}
	db.keys.add(id, k)
	return k, nil
}

// idOf returns the text id of key as a reader sees it.
func (db *DB) idOf(ctx context.Context, q queryRower, key int64) (string, error) {
	if id, ok := db.keys.id(key); ok {
		return id, nil
	}
	var id string
	if err := q.QueryRowContext(ctx, `SELECT id FROM ids WHERE key = ?`, key).Scan(&id); err != nil {
		return "", fmt.Errorf("id of key %d: %w", key, err)
	}
	db.keys.add(id, key)
	return id, nil
}

// cmidHash is the dedup key of a client_msg_id: the first 8 bytes of its
// SHA-256 as a signed integer. The index on (conv, sender, cmid_hash) is
// about a fifth of one on the text, so it stays in the page cache for a
// history five times as long; the stored client_msg_id confirms a hit
// (cmidSlots). A variable so that tests can make collisions.
var cmidHash = func(cmid string) int64 {
	s := sha256.Sum256([]byte(cmid))
	return int64(binary.BigEndian.Uint64(s[:8]))
}

// cmidProbes is how many slots a client_msg_id may take: its hash and
// the next ones. Two different client_msg_ids of one sender in one
// conversation share a hash with a probability of 2^-64 per pair; the
// second then takes the next free slot, and a look-up reads all the slots
// (at most cmidProbes rows of the index) and compares the stored text, so
// two different client_msg_ids are never taken for one another.
const cmidProbes = 4

// cmidSlots returns the slots of cmid's hash, in probe order (wrapping
// around at the largest int64).
func cmidSlots(cmid string) [cmidProbes]int64 {
	h := cmidHash(cmid)
	var s [cmidProbes]int64
	for i := range s {
		s[i] = h + int64(i) // Go's int64 arithmetic wraps
	}
	return s
}

// senderOf names senders' keys for scanMessage, reading in q on a miss.
func (db *DB) senderOf(ctx context.Context, q queryRower) func(int64) (string, error) {
	return func(k int64) (string, error) { return db.idOf(ctx, q, k) }
}
