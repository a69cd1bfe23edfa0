package storage

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// keyFilter is a Bloom filter of the keys in the dedup levels on file
// (dedup_1, dedup_2). A claim whose slots it has never seen skips reading
// those levels: the read cost about 6 µs per append (two b-tree seeks
// through pages the writer's cache mostly lacks once the levels are big),
// the costliest step of an append left after the level in memory. A
// filter only answers "maybe" or "no"; "maybe" (a retry, or about 2% of
// new keys) reads the levels as before.
//
// It must never say "no" for a key on file (PROTOCOL guarantee 3). Keys
// reach the files three ways: the migrations (before the store opens),
// moves out of the level in memory, and moves from dedup_1 to dedup_2
// (keys the filter has already). A key moved out of memory leaves the
// level when the mark rises past it (memLevel.raise), in this process or,
// for another process's move, when this one reads the mark; raise adds it
// then, to the filter in use and to one being built. A build registers
// itself before it reads the levels, so a key is either on file when the
// build's read begins (and read) or moved after (and added by raise; see
// filters.added for the end of a build).
// Retention deletes keys from the levels; the filter keeps them: a
// needless read, never a wrong answer.
type keyFilter struct {
	words  []atomic.Uint64
	nbits  uint64
	limit  int64 // keys it was sized for; past them it is rebuilt bigger
	added  atomic.Int64
	hashes int
}

// filterBitsPerKey and filterHashes give about 2% false positives at the
// filter's limit: 8 bits (1 byte) per key, 16 MB for a 10M-message
// history sized with headroom.
const (
	filterBitsPerKey = 8
	filterHashes     = 5
)

func newKeyFilter(limit int64) *keyFilter {
	n := uint64(limit) * filterBitsPerKey
	return &keyFilter{words: make([]atomic.Uint64, (n+63)/64), nbits: n, limit: limit, hashes: filterHashes}
}

// filterSize is the limit a filter for n keys on file is made with: room
// for half as many again, and at least 65536 (64 KiB, saved at every
// stop). A growing history rebuilds it at 1.5 times its keys each time:
// every key is read about three times in all.
func filterSize(n int64) int64 { return max(n+n/2, 1<<16) }

func filterHash(k dedupKey) (uint64, uint64) {
	x := uint64(k.conv)*0x9E3779B97F4A7C15 ^ uint64(k.sender)*0xC2B2AE3D27D4EB4F ^ uint64(k.hash)
	h1 := splitmix64(x)
	return h1, splitmix64(h1) | 1
}

func splitmix64(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
	x = (x ^ (x >> 27)) * 0x94D049BB133111EB
	return x ^ (x >> 31)
}

// bit maps a hash to a bit (Lemire's multiply-shift, not a modulo).
func (f *keyFilter) bit(h uint64) uint64 {
	hi, _ := bits.Mul64(h, f.nbits)
	return hi
}

// add records k. Safe beside other adds and look-ups.
func (f *keyFilter) add(k dedupKey) {
	h1, h2 := filterHash(k)
	for i := range f.hashes {
		b := f.bit(h1 + uint64(i)*h2)
		f.words[b/64].Or(1 << (b % 64))
	}
	f.added.Add(1)
}

// mayHave is false when k was never added.
func (f *keyFilter) mayHave(k dedupKey) bool {
	h1, h2 := filterHash(k)
	for i := range f.hashes {
		b := f.bit(h1 + uint64(i)*h2)
		if f.words[b/64].Load()&(1<<(b%64)) == 0 {
			return false
		}
	}
	return true
}

// mayHaveRange is false when no slot of (conv, sender) from lo to hi was
// ever added.
func (f *keyFilter) mayHaveRange(conv, sender, lo, hi int64) bool {
	for h := lo; ; h++ {
		if f.mayHave(dedupKey{conv, sender, h}) {
			return true
		}
		if h == hi {
			return false
		}
	}
}

// buildFilters is false in tests that build (or load) filters themselves.
var buildFilters = true

// filters are the writer's: the one claims use (nil until the first build
// ends) and the one being built.
type filters struct {
	ready    atomic.Pointer[keyFilter]
	building atomic.Pointer[keyFilter]
	build    sync.Mutex // one build at a time: building has one slot
}

// added records a key that reached the levels on file in every filter.
// The one being built is read first: a build puts its filter in use
// before it stops registering it, so whichever way the two interleave
// with a build's end, the key reaches the filter that build made.
// (Read the other way round, both reads could miss it: the old filter
// read as in use, then none being built.)
func (fs *filters) added(k dedupKey) {
	b, r := fs.building.Load(), fs.ready.Load()
	if b != nil {
		b.add(k)
	}
	if r != nil && r != b {
		r.add(k)
	}
}

// filterLoop builds the filter when the store opens and again, bigger,
// whenever the one in use holds more keys than it was sized for.
func (db *DB) filterLoop(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	if !buildFilters {
		return
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if f := db.w.filters.ready.Load(); f == nil || f.added.Load() > f.limit {
			if err := db.buildFilter(ctx); err != nil && ctx.Err() == nil {
				db.opts.Logger.Warn("dedup: building the key filter", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// buildFilter reads every key on file into a new filter, then puts it in
// use.
func (db *DB) buildFilter(ctx context.Context) error {
	start := time.Now()
	var n int64
	if err := db.readers.QueryRowContext(ctx, `SELECT (SELECT COUNT(*) FROM dedup_1) + (SELECT COUNT(*) FROM dedup_2)`).Scan(&n); err != nil {
		return err
	}
	f := newKeyFilter(filterSize(n))
	fs := &db.w.filters
	fs.build.Lock()
	defer fs.build.Unlock()
	fs.building.Store(f)
	defer fs.building.Store(nil)
	rows, err := db.readers.QueryContext(ctx, `SELECT conv, sender, cmid_hash FROM dedup_1 UNION ALL SELECT conv, sender, cmid_hash FROM dedup_2`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var k dedupKey
		if err := rows.Scan(&k.conv, &k.sender, &k.hash); err != nil {
			return err
		}
		f.add(k)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	fs.ready.Store(f)
	if took := time.Since(start); took > time.Second {
		// A big history's: claims read the levels on file until now.
		db.opts.Logger.Info("dedup: key filter ready", "keys", f.added.Load(), "bytes", 8*len(f.words), "took", took.Round(time.Millisecond))
	}
	return nil
}

// saveFilter stores the filter in use with the view of the counters it
// is complete for, in a writer transaction (synced first, so the view is
// the file's as of now, and nothing moves keys meanwhile).
func (db *DB) saveFilter(ctx context.Context) error {
	f := db.w.filters.ready.Load()
	if f == nil || db.w.filters.building.Load() != nil {
		return nil
	}
	return db.w.execKeepingMembers(ctx, func(t *wtx) error {
		if _, err := t.mem(); err != nil {
			return err
		}
		b := make([]byte, 8*len(f.words))
		for i := range f.words {
			binary.LittleEndian.PutUint64(b[8*i:], f.words[i].Load())
		}
		l := t.w.mem
		_, err := t.ExecContext(t.ctx, `INSERT OR REPLACE INTO dedup_filter (id, mark, hi, nbits, hashes, lim, added, bits) VALUES (1, ?, ?, ?, ?, ?, ?, ?)`,
			l.mark, l.seen, int64(f.nbits), f.hashes, f.limit, f.added.Load(), b)
		return err
	})
}

// loadFilter returns the saved filter if it is complete for the file as it
// is (mark and hi are the counters now), nil otherwise. It runs before the
// writer starts: no key reaches the file meanwhile.
func loadFilter(ctx context.Context, db *sql.DB, mark, hi int64) (*keyFilter, error) {
	var fmark, fhi, nbits, limit, added int64
	var hashes int
	var b []byte
	err := db.QueryRowContext(ctx, `SELECT mark, hi, nbits, hashes, lim, added, bits FROM dedup_filter WHERE id = 1`).
		Scan(&fmark, &fhi, &nbits, &hashes, &limit, &added, &b)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	words := (nbits + 63) / 64
	if fmark != mark || fhi != hi || hashes < 1 || nbits < 1 || int64(len(b)) != 8*words {
		return nil, nil
	}
	f := &keyFilter{words: make([]atomic.Uint64, words), nbits: uint64(nbits), limit: limit, hashes: hashes}
	for i := range f.words {
		f.words[i].Store(binary.LittleEndian.Uint64(b[8*i:]))
	}
	f.added.Store(added)
	return f, nil
}
