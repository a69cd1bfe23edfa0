// Package populate fills a database with a team's history (users,
// conversations, millions of messages, read and ack positions) through the
// store's own write path (storage.DB's methods, never raw SQL), so that
// what it makes holds every invariant the server keeps: gapless seqs,
// max_seq, versions, the dedup index, members' ranges. `imserver bench
// --scenario growth` measures the server on what it makes.
package populate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/imserver/imserver/chat"
	"github.com/imserver/imserver/storage"
)

// Password is every generated user's password: the bench logs in with it.
const Password = "populate-password-0123456789"

// Username is the name of generated user i. User 0 is the busy one: a
// member of ListConversations conversations.
func Username(i int) string { return fmt.Sprintf("pop%d", i) }

// ListConversations is how many conversations user 0 is in: the
// conversation list the growth bench times.
const ListConversations = 300

// Options shape the history.
type Options struct {
	DB       string
	Users    int // default 500
	Directs  int // default 2000
	Groups   int // default 300
	Messages int // 0 makes the users and conversations only
	// AllHands is how many groups hold every user (default 3).
	AllHands int
	// ZipfS skews messages over conversations (default 1.1: the busiest
	// conversation gets about a seventh of all messages, most get a few).
	ZipfS float64
	Seed  uint64
	// Span is how far back the first message is (default a year): the
	// messages' timestamps run from now-Span to now, in seq order.
	Span time.Duration
	// Synchronous is the store's mode while populating; NORMAL (the
	// default) survives a crash of the generator but not of the machine,
	// which is fine for generated data and twice as fast on a slow disk.
	Synchronous string
	// syncSet: Synchronous was given (More defaults to FULL, a server's).
	syncSet   bool
	BatchSize int // writer batch, default 5000
	CacheKiB  int // writer page cache, default 256 MiB
	Workers   int // concurrent appenders, default 8
	// NoMutations leaves out the team mix: by default a tenth of the
	// messages are reactions and 3% edits of recent text messages.
	NoMutations bool
	// More appends Messages messages to a history this package made
	// earlier (o.DB must exist), with wall-clock timestamps: the writer's
	// cost on a database of that size, measured (Stats.MessagesPerSec)
	// with the store's own batching and the given Synchronous mode.
	More bool
	// Progress receives a line every ProgressEvery (nil: none).
	Progress      io.Writer
	ProgressEvery time.Duration
}

// Stats is what a run made.
type Stats struct {
	Users, Directs, Groups int
	Messages               int64
	MemberRows             int
	Seconds                float64
	MessagesPerSec         float64
	FileBytes              int64
}

type conv struct {
	id      string
	members []int // indexes of users
	group   bool
	maxSeq  atomic.Int64
}

func (o *Options) defaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.Users, 500)
	def(&o.Directs, 2000)
	def(&o.Groups, 300)
	def(&o.AllHands, 3)
	def(&o.BatchSize, 5000)
	def(&o.CacheKiB, 256*1024)
	def(&o.Workers, 8)
	if o.ZipfS <= 1 {
		o.ZipfS = 1.1
	}
	if o.Span <= 0 {
		o.Span = 365 * 24 * time.Hour
	}
	if o.Synchronous == "" {
		o.Synchronous = "NORMAL"
	} else {
		o.syncSet = true
	}
	if o.ProgressEvery <= 0 {
		o.ProgressEvery = 2 * time.Second
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	o.AllHands = min(o.AllHands, o.Groups)
}

// Run makes the history in a new database file at o.DB; it refuses a file
// that exists, so that it never mixes with real data.
func Run(ctx context.Context, o Options) (Stats, error) {
	o.defaults()
	var st Stats
	if o.DB == "" {
		return st, errors.New("populate: no database path")
	}
	if o.More {
		return more(ctx, o)
	}
	if _, err := os.Stat(o.DB); err == nil {
		return st, fmt.Errorf("populate: %s exists; the generator only makes new databases", o.DB)
	}
	if o.Users < 2 {
		return st, errors.New("populate: need at least 2 users")
	}
	if maxDirects := o.Users * (o.Users - 1) / 2; o.Directs > maxDirects {
		return st, fmt.Errorf("populate: %d users have at most %d direct conversations", o.Users, maxDirects)
	}
	start := time.Now()
	rng := mrand.New(mrand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))
	// Timestamps from now-Span to now, one step per message, in commit
	// order (the writer calls the clock once per message, in seq order).
	var tick atomic.Int64
	base := start.Add(-o.Span).UnixMilli()
	step := float64(o.Span.Milliseconds()) / float64(max(o.Messages, 1))
	clock := func() int64 { return base + int64(float64(tick.Add(1))*step) }
	db, err := storage.Open(ctx, o.DB, storage.Options{
		Synchronous: o.Synchronous,
		BatchSize:   o.BatchSize,
		CacheKiB:    o.CacheKiB,
		Clock:       clock,
	})
	if err != nil {
		return st, err
	}
	closed := false
	defer func() {
		if !closed {
			db.Close()
		}
	}()

	users, err := createUsers(ctx, db, o)
	if err != nil {
		return st, err
	}
	st.Users = len(users)
	fmt.Fprintf(o.Progress, "populate: %d users\n", len(users))
	convs, rows, err := createConversations(ctx, db, o, rng, users)
	if err != nil {
		return st, err
	}
	st.Directs, st.Groups, st.MemberRows = o.Directs, o.Groups, rows
	fmt.Fprintf(o.Progress, "populate: %d direct and %d group conversations, %d member rows\n", o.Directs, o.Groups, rows)
	n, err := appendMessages(ctx, db, o, rng, users, convs)
	st.Messages = n
	if err != nil {
		return st, err
	}
	if err := setPositions(ctx, db, rng, users, convs); err != nil {
		return st, err
	}
	if err := settle(ctx, o, db); err != nil {
		return st, err
	}
	closed = true
	if err := db.Close(); err != nil {
		return st, err
	}
	st.Seconds = time.Since(start).Seconds()
	if st.Seconds > 0 {
		st.MessagesPerSec = float64(st.Messages) / st.Seconds
	}
	st.FileBytes = FileBytes(o.DB)
	return st, nil
}

// FileBytes is the size of the database with its WAL.
func FileBytes(path string) int64 {
	var n int64
	for _, p := range []string{path, path + "-wal"} {
		if fi, err := os.Stat(p); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// par runs f(0..n-1) on w goroutines; the first error stops the rest.
func par(ctx context.Context, n, w int, f func(i int) error) error {
	var next atomic.Int64
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	for range min(w, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					next.Store(int64(n))
					return
				}
			}
		}()
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

// createUsers makes the accounts, all with Password (hashed once: argon2id
// per user would be most of the time of a small run).
func createUsers(ctx context.Context, db *storage.DB, o Options) ([]string, error) {
	hash, err := chat.HashPassword(Password)
	if err != nil {
		return nil, err
	}
	ids := make([]string, o.Users)
	err = par(ctx, o.Users, 64, func(i int) error {
		ids[i] = chat.NewID()
		return db.CreateUser(ctx, chat.User{ID: ids[i], Username: Username(i), DisplayName: fmt.Sprintf("Populated User %d", i)}, hash)
	})
	return ids, err
}

// createConversations makes the directs and groups. User 0 is in
// ListConversations of them (a sixth directs, the rest groups, as far as
// the counts allow); the first AllHands groups hold everyone; the other
// groups' sizes run from 3 to 500 with most of them small.
func createConversations(ctx context.Context, db *storage.DB, o Options, rng *mrand.Rand, users []string) ([]*conv, int, error) {
	nu := len(users)
	// Directs: pairs, user 0's first.
	u0Directs := min(ListConversations/6, nu-1, o.Directs)
	pairs := map[[2]int]bool{}
	var directs []*conv
	addPair := func(a, b int) bool {
		if a == b {
			return false
		}
		if a > b {
			a, b = b, a
		}
		if pairs[[2]int{a, b}] {
			return false
		}
		pairs[[2]int{a, b}] = true
		directs = append(directs, &conv{members: []int{a, b}})
		return true
	}
	for i := 1; i <= u0Directs; i++ {
		addPair(0, i)
	}
	for len(directs) < o.Directs {
		// Not user 0: its count is fixed above.
		addPair(1+rng.IntN(nu-1), 1+rng.IntN(nu-1))
	}
	u0Groups := min(ListConversations-u0Directs, o.Groups)
	groups := make([]*conv, o.Groups)
	for g := range groups {
		var size int
		switch {
		case g < o.AllHands:
			size = nu
		case g%25 == 0:
			size = 100 + rng.IntN(401) // a few departments, 100–500
		default:
			// Log-uniform 3..100: most groups small.
			size = int(3 * math.Pow(100.0/3, rng.Float64()))
		}
		size = min(max(size, 3), nu)
		// User 0 is in the first u0Groups groups and no other.
		in := g < u0Groups
		perm := rng.Perm(nu - 1)
		var members []int
		if in {
			members = append(members, 0)
		}
		for _, p := range perm {
			if len(members) == size {
				break
			}
			members = append(members, p+1)
		}
		if !in && size == nu {
			// An all-hands group that user 0 is not to be in: one short.
			members = members[:nu-1]
		}
		// The owner is a random member, not always user 0.
		k := rng.IntN(len(members))
		members[0], members[k] = members[k], members[0]
		groups[g] = &conv{members: members, group: true}
	}
	rows := 0
	err := par(ctx, len(directs), 32, func(i int) error {
		c := directs[i]
		id, _, err := db.CreateDirect(ctx, chat.NewID(), users[c.members[0]], users[c.members[1]])
		c.id = id
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	err = par(ctx, len(groups), 16, func(i int) error {
		c := groups[i]
		c.id = chat.NewID()
		ids := make([]string, 0, len(c.members)-1)
		for _, m := range c.members[1:] {
			ids = append(ids, users[m])
		}
		return db.CreateGroup(ctx, c.id, fmt.Sprintf("group %d", i), users[c.members[0]], ids)
	})
	if err != nil {
		return nil, 0, err
	}
	all := append(groups, directs...)
	for _, c := range all {
		rows += len(c.members)
	}
	return all, rows, nil
}

// appendMessages sends o.Messages messages: each picks a conversation by a
// Zipf law over a random ranking in which groups come first (a few busy
// groups, then a long tail of groups and directs), a random member as
// sender, a random UUID as client_msg_id (what the web client sends) and
// a body of 10–200 bytes of words.
func appendMessages(ctx context.Context, db *storage.DB, o Options, rng *mrand.Rand, users []string, convs []*conv) (int64, error) {
	if o.Messages == 0 {
		return 0, nil
	}
	// Ranking: groups shuffled, then directs shuffled, with a few directs
	// lifted into the busy head (two people who talk all day).
	groups, directs := convs[:o.Groups], convs[o.Groups:]
	rank := append([]*conv(nil), groups...)
	rng.Shuffle(len(rank), func(i, j int) { rank[i], rank[j] = rank[j], rank[i] })
	ds := append([]*conv(nil), directs...)
	rng.Shuffle(len(ds), func(i, j int) { ds[i], ds[j] = ds[j], ds[i] })
	for i := 0; i < min(5, len(ds)); i++ {
		at := min(len(rank), 3+i*4)
		rank = append(rank[:at], append([]*conv{ds[i]}, rank[at:]...)...)
	}
	rank = append(rank, ds[min(5, len(ds)):]...)

	var done, issued atomic.Int64
	total := int64(o.Messages)
	start := time.Now()
	stop := make(chan struct{})
	var pwg sync.WaitGroup
	pwg.Add(1)
	go func() {
		defer pwg.Done()
		t := time.NewTicker(o.ProgressEvery)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				n := done.Load()
				el := time.Since(start).Seconds()
				rate := float64(n) / el
				eta := "?"
				if rate > 0 {
					eta = (time.Duration(float64(total-n)/rate) * time.Second).Round(time.Second).String()
				}
				fmt.Fprintf(o.Progress, "populate: %d/%d messages (%.0f%%), %.0f/s, eta %s, %s on disk\n",
					n, total, 100*float64(n)/float64(total), rate, eta, mib(FileBytes(o.DB)))
			}
		}
	}()
	defer func() { close(stop); pwg.Wait() }()

	// Each worker queues a chunk, then waits for its answers: thousands
	// of appends in flight make the writer's transactions large.
	const chunk = 2000
	var mu sync.Mutex // guards seeds
	seeds := rng.Uint64()
	err := par(ctx, o.Workers, o.Workers, func(int) error {
		mu.Lock()
		seeds++
		r := mrand.New(mrand.NewPCG(seeds, 0x5eed))
		mu.Unlock()
		zipf := mrand.NewZipf(r, o.ZipfS, 1, uint64(len(rank)-1))
		pend := make([]chat.Pending, 0, chunk)
		targets := make([]*conv, 0, chunk)
		var kinds []string
		type stored struct {
			conv *conv
			seq  int64
			from string
		}
		var recent []stored
		for {
			kinds = kinds[:0]
			k := min(chunk, total-issued.Add(chunk)+chunk)
			if k <= 0 {
				return nil
			}
			pend, targets = pend[:0], targets[:0]
			for range k {
				c := rank[zipf.Uint64()]
				from := users[c.members[r.IntN(len(c.members))]]
				m := chat.Message{Conv: c.id, From: from, ClientMsgID: uuid(r), Kind: chat.KindText, Body: body(r)}
				if !o.NoMutations && len(recent) > 0 {
					// The team mix: reactions (10%) and edits (3%) of
					// text messages this worker stored recently.
					switch x := r.Float64(); {
					case x < 0.10:
						t := recent[r.IntN(len(recent))]
						on := true
						m = chat.Message{Conv: t.conv.id, From: users[t.conv.members[r.IntN(len(t.conv.members))]], ClientMsgID: uuid(r),
							Kind: chat.KindReaction, Target: t.seq, Emoji: emoji[r.IntN(len(emoji))], On: &on}
						c = t.conv
					case x < 0.13:
						t := recent[r.IntN(len(recent))]
						m = chat.Message{Conv: t.conv.id, From: t.from, ClientMsgID: uuid(r), Kind: chat.KindEdit, Target: t.seq, Body: body(r)}
						c = t.conv
					}
				}
				pend = append(pend, db.Append(ctx, m))
				targets = append(targets, c)
				kinds = append(kinds, m.Kind)
			}
			for i, p := range pend {
				m, _, err := p()
				if err != nil && kinds[i] != chat.KindText && chat.ErrorCode(err) != "" {
					continue // a mutation the store refused (e.g. of a message deleted meanwhile): the mix, not a failure
				}
				if err != nil {
					return fmt.Errorf("append: %w", err)
				}
				c := targets[i]
				if kinds[i] == chat.KindText {
					if len(recent) < 256 {
						recent = append(recent, stored{c, m.Seq, m.From})
					} else {
						recent[r.IntN(len(recent))] = stored{c, m.Seq, m.From}
					}
				}
				for {
					cur := c.maxSeq.Load()
					if m.Seq <= cur || c.maxSeq.CompareAndSwap(cur, m.Seq) {
						break
					}
				}
			}
			done.Add(int64(k))
		}
	})
	return done.Load(), err
}

// setPositions moves every member's read and ack markers: most members are
// up to date, some a little behind, a few far behind.
func setPositions(ctx context.Context, db *storage.DB, rng *mrand.Rand, users []string, convs []*conv) error {
	type pos struct {
		conv *conv
		user int
		seq  int64
	}
	var ps []pos
	for _, c := range convs {
		max := c.maxSeq.Load()
		if max == 0 {
			continue
		}
		for _, u := range c.members {
			var s int64
			switch x := rng.Float64(); {
			case x < 0.7:
				s = max
			case x < 0.9:
				s = max - rng.Int64N(min(max, 100))
			default:
				s = rng.Int64N(max + 1)
			}
			if s > 0 {
				ps = append(ps, pos{c, u, s})
			}
		}
	}
	var acks []chat.Ack
	for _, p := range ps {
		acks = append(acks, chat.Ack{Conv: p.conv.id, User: users[p.user], Seq: p.seq})
	}
	for len(acks) > 0 {
		n := min(len(acks), 1000)
		if err := db.SaveAcks(ctx, acks[:n]); err != nil {
			return err
		}
		acks = acks[n:]
	}
	return par(ctx, len(ps), 64, func(i int) error {
		_, _, err := db.SetRead(ctx, ps[i].conv.id, users[ps[i].user], ps[i].seq)
		return err
	})
}

func uuid(r *mrand.Rand) string {
	var b [16]byte
	for i := 0; i < 16; i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

var emoji = []string{"👍", "🎉", "😂", "❤️", "👀", ":ship:"}

var words = strings.Fields(`the a to and of in is it for on that this we with be can at
deploy build review merge ticket meeting lunch today tomorrow please thanks ok sure done
fix bug test release server client database page query index cache latency budget plan
customer design doc draft ship green red flaky check later now soon yes no maybe looks good`)

// SearchTerms are pairs of the history's words, as two-word searches:
// the same n pairs for the same seed.
func SearchTerms(n int, seed uint64) []string {
	r := mrand.New(mrand.NewPCG(seed, 0x5ea4c4))
	out := make([]string, n)
	for i := range out {
		out[i] = words[r.IntN(len(words))] + " " + words[r.IntN(len(words))]
	}
	return out
}

// body is 10–200 bytes of words, mostly short (chat lines).
func body(r *mrand.Rand) string {
	n := 10 + int(190*r.Float64()*r.Float64())
	var sb strings.Builder
	for sb.Len() < n {
		if sb.Len() > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(words[r.IntN(len(words))])
	}
	return sb.String()
}

func mib(n int64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }

// more is Run with o.More: it finds the generated users (by name) and
// their conversations (through each user's conversation list) and appends
// o.Messages more messages to them.
func more(ctx context.Context, o Options) (Stats, error) {
	var st Stats
	if _, err := os.Stat(o.DB); err != nil {
		return st, fmt.Errorf("populate --more: %w", err)
	}
	// Its seqs come from the file, as a server's without Redis do: beside
	// a running server both would hand out the same ones.
	if err := storage.CheckUnused(ctx, o.DB); err != nil {
		return st, fmt.Errorf("populate --more: %s: %w", o.DB, err)
	}
	if o.Synchronous == "NORMAL" && !o.syncSet {
		o.Synchronous = "FULL"
	}
	db, err := storage.Open(ctx, o.DB, storage.Options{Synchronous: o.Synchronous, BatchSize: o.BatchSize})
	if err != nil {
		return st, err
	}
	defer db.Close()
	var users []string
	index := map[string]int{}
	for i := 0; ; i++ {
		u, _, err := db.UserByName(ctx, Username(i))
		if chat.ErrorCode(err) == chat.ENotFound {
			break
		} else if err != nil {
			return st, err
		}
		index[u.ID] = len(users)
		users = append(users, u.ID)
	}
	if len(users) < 2 {
		return st, fmt.Errorf("populate --more: %s holds no generated users (pop0, pop1, ...)", o.DB)
	}
	byID := map[string]*conv{}
	var groups, directs []*conv
	for ui, u := range users {
		var since int64
		for {
			ch, err := db.ConversationsSince(ctx, u, since, chat.MaxPageLimit)
			if err != nil {
				return st, err
			}
			for _, c := range ch.Conversations {
				if c.Left {
					continue
				}
				cv := byID[c.ID]
				if cv == nil {
					cv = &conv{id: c.ID, group: c.Kind == chat.Group}
					byID[c.ID] = cv
					if cv.group {
						groups = append(groups, cv)
					} else {
						directs = append(directs, cv)
					}
				}
				cv.members = append(cv.members, ui)
				since = max(since, c.Version)
			}
			if ch.Completed {
				break
			}
		}
	}
	// A stable order, so that the same seed ranks the same conversations.
	sortConvs := func(cs []*conv) { sort.Slice(cs, func(i, j int) bool { return cs[i].id < cs[j].id }) }
	sortConvs(groups)
	sortConvs(directs)
	o.Groups = len(groups)
	convs := append(groups, directs...)
	// The clock in the seed: each --more appends new client ids. With the
	// seed alone a second run on the same file re-sent the first one's
	// messages and measured dedup answers, not appends.
	rng := mrand.New(mrand.NewPCG(o.Seed+1, uint64(time.Now().UnixNano())))
	start := time.Now()
	ws0, io0 := db.WriterStats(), readProcIO()
	n, err := appendMessages(ctx, db, o, rng, users, convs)
	st.Messages = n
	st.Seconds = time.Since(start).Seconds()
	if err != nil {
		return st, err
	}
	ws, io1 := db.WriterStats(), readProcIO()
	reportCost(o.Progress, n, ws.Commits-ws0.Commits, ws.WALPages-ws0.WALPages, io0, io1)
	if err := settle(ctx, o, db); err != nil {
		return st, err
	}
	if st.Seconds > 0 {
		st.MessagesPerSec = float64(n) / st.Seconds
	}
	st.Users, st.Groups, st.Directs = len(users), len(groups), len(directs)
	if err := db.Close(); err != nil {
		return st, err
	}
	st.FileBytes = FileBytes(o.DB)
	return st, nil
}

// settle waits for the store's dedup job to catch up with what was
// appended (storage.DB.SettleDedup), so that the history is left as a
// server that kept up would leave it, and says how long that took: it is
// part of what the appends cost, paid after them and reported apart from
// --more's rate. A job that cannot move (its failures are logged) gives
// up after settleTimeout.
func settle(ctx context.Context, o Options, db *storage.DB) error {
	t0 := time.Now()
	sctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	if err := db.SettleDedup(sctx); err != nil {
		return fmt.Errorf("waiting for the dedup job to catch up (%v): %w", time.Since(t0).Round(time.Second), err)
	}
	if d := time.Since(t0); d > time.Second {
		fmt.Fprintf(o.Progress, "populate: the dedup job caught up %.1fs after the last append\n", d.Seconds())
	}
	return nil
}

// settleTimeout bounds settle: a 10M history's backlog of 8.7M entries
// took 7 s.
const settleTimeout = 10 * time.Minute
