// Package storetest is the contract of chat.Store: the behaviour every
// store (SQLite in package storage, PostgreSQL in package postgres) must
// show, run by each store's tests against a real database.
package storetest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/imserver/imserver/chat"
)

// Options are what the suite asks of a store it opens.
type Options struct {
	// BatchDelay holds the writer's transaction open this long, so that
	// jobs queued meanwhile share it.
	BatchDelay time.Duration
	// OnCommit receives committed messages.
	OnCommit func([]chat.Message)
}

// Opener opens the same database each time it is called (so a test can
// close and reopen it); close must let queued work finish.
type Opener func(t *testing.T, o Options) (s chat.Store, close func())

// NewDatabase returns an Opener for a fresh, empty database.
type NewDatabase func(t *testing.T) Opener

// Run runs the contract against the store newDB makes.
func Run(t *testing.T, newDB NewDatabase) {
	tests := []struct {
		name string
		fn   func(*testing.T, Opener)
	}{
		{"AppendConcurrentGapless", testAppendConcurrentGapless},
		{"AppendRefused", testAppendRefused},
		{"RetryOnly", testRetryOnly},
		{"RosterVersion", testRosterVersion},
		{"SeqsAfterReopen", testSeqsAfterReopen},
		{"MembershipChangeInsideBatch", testMembershipChangeInsideBatch},
		{"OnCommitOrder", testOnCommitOrder},
		{"Users", testUsers},
		{"Tokens", testTokens},
		{"DirectAndEntries", testDirectAndEntries},
		{"VersionsSync", testVersionsSync},
		{"ReadsAndAcks", testReadsAndAcks},
		{"ClearHistory", testClearHistory},
		{"Paging", testPaging},
		{"RemoveOwner", testRemoveOwner},
		{"SetRole", testSetRole},
		{"DeleteUser", testDeleteUser},
		{"Invites", testInvites},
		{"AdminAndNotify", testAdminAndNotify},
		{"MutationsInOneBatch", testMutationsInOneBatch},
		{"ReactionOrder", testReactionOrder},
		{"SelfMention", testSelfMention},
		{"SearchVisibleRanges", testSearchVisibleRanges},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newDB(t)) })
	}
}

func open(t *testing.T, o Opener, opts Options) chat.Store {
	s, closeFn := o(t, opts)
	t.Cleanup(closeFn)
	return s
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantCode(t *testing.T, what string, err error, code string) {
	t.Helper()
	if got := chat.ErrorCode(err); got != code {
		t.Errorf("%s: got %v, want %s", what, err, code)
	}
}

func text(conv, from, id string) chat.Message {
	return chat.Message{Conv: conv, From: from, ClientMsgID: id, Kind: chat.KindText, Body: "body " + id}
}

// allSeqs reads every seq of conv user may see, in order.
func allSeqs(t *testing.T, s chat.Store, conv, user string) []int64 {
	t.Helper()
	var seqs []int64
	after := int64(0)
	for {
		p, err := s.Messages(context.Background(), conv, user, chat.PageQuery{After: after, Limit: 1000})
		must(t, err)
		for _, m := range p.Messages {
			seqs = append(seqs, m.Seq)
			after = m.Seq
		}
		if p.Completed {
			return seqs
		}
	}
}

// testAppendConcurrentGapless sends from many goroutines into a few
// groups, every message twice (a retry): each group's seqs are 1..n
// without gaps, and a retry gets the seq of the first send.
func testAppendConcurrentGapless(t *testing.T, o Opener) {
	ctx := context.Background()
	db := open(t, o, Options{})
	const groups, senders, each = 5, 40, 30
	for g := range groups {
		must(t, db.CreateGroup(ctx, fmt.Sprint("g", g), "g", "u0", nil))
	}
	for s := 1; s < senders; s++ {
		for g := range groups {
			_, err := db.AddMembers(ctx, fmt.Sprint("g", g), []string{fmt.Sprint("u", s)})
			must(t, err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, senders)
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				m := text(fmt.Sprint("g", (s+i)%groups), fmt.Sprint("u", s), fmt.Sprint(i))
				first := db.Append(ctx, m)
				retry := db.Append(ctx, m)
				a, dupA, err := first()
				if err != nil {
					errs <- err
					return
				}
				b, dupB, err := retry()
				if err != nil {
					errs <- err
					return
				}
				if dupA || !dupB || a.Seq != b.Seq || b.Body != m.Body || b.TS != a.TS {
					errs <- fmt.Errorf("send %v: got (%d, dup %v) then (%d, dup %v)", m, a.Seq, dupA, b.Seq, dupB)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	total := 0
	for g := range groups {
		conv := fmt.Sprint("g", g)
		seqs := allSeqs(t, db, conv, "u0")
		for i, s := range seqs {
			if s != int64(i+1) {
				t.Fatalf("%s: seq %d at %d", conv, s, i)
			}
		}
		total += len(seqs)
		c, err := db.Conversation(ctx, conv, "u0")
		must(t, err)
		if c.MaxSeq != int64(len(seqs)) {
			t.Errorf("%s: max_seq %d, want %d", conv, c.MaxSeq, len(seqs))
		}
	}
	if total != senders*each {
		t.Errorf("got %d messages, want %d", total, senders*each)
	}
}

// testAppendRefused covers the messages a batch refuses alone.
func testAppendRefused(t *testing.T, o Opener) {
	ctx := context.Background()
	db := open(t, o, Options{})
	must(t, db.CreateGroup(ctx, "g", "g", "u", []string{"v"}))
	must(t, db.RemoveMember(ctx, "g", "v"))
	ok := db.Append(ctx, text("g", "u", "1"))
	kicked := db.Append(ctx, text("g", "v", "1"))
	stranger := db.Append(ctx, text("g", "w", "1"))
	missing := db.Append(ctx, text("nope", "u", "1"))
	if m, _, err := ok(); err != nil || m.Seq != 1 {
		t.Errorf("member: got seq %d, %v", m.Seq, err)
	}
	_, _, err := kicked()
	wantCode(t, "kicked", err, chat.ENotMember)
	_, _, err = stranger()
	wantCode(t, "stranger", err, chat.ENotMember)
	if _, _, err := missing(); chat.ErrorCode(err) != chat.ENotFound && chat.ErrorCode(err) != chat.ENotMember {
		t.Errorf("no conversation: got %v", err)
	}
	if m, _, err := db.Append(ctx, text("g", "u", "2"))(); err != nil || m.Seq != 2 {
		t.Errorf("next: got seq %d, %v", m.Seq, err)
	}
}

// testRetryOnly: a message marked RetryOnly is answered with the message
// stored earlier under its client_msg_id (a text, a mutation, one queued
// in the same batch, one stored before a reopen), and otherwise refused
// with its error, storing nothing and taking no seq.
func testRetryOnly(t *testing.T, o Opener) {
	ctx := context.Background()
	over := &chat.Error{Code: chat.ERateLimited, Message: "sending too fast", RetryAfterMS: 20}
	retry := func(m chat.Message) chat.Message { m.RetryOnly = over; return m }
	db, closeFn := o(t, Options{})
	must(t, db.CreateGroup(ctx, "g", "g", "u", []string{"v"}))
	for _, id := range []string{"1", "2"} {
		_, _, err := db.Append(ctx, text("g", "u", id))()
		must(t, err)
	}
	closeFn()

	db = open(t, o, Options{BatchDelay: 100 * time.Millisecond})
	react := reaction("g", "v", "r", 1, "👍", true)
	_, _, err := db.Append(ctx, react)()
	must(t, err)
	// One batch: retries of what was stored before the reopen, a new
	// text, its retry behind it, and sends that are no retries.
	pend := []chat.Pending{
		db.Append(ctx, retry(text("g", "u", "1"))),
		db.Append(ctx, retry(react)),
		db.Append(ctx, text("g", "u", "3")),
		db.Append(ctx, retry(text("g", "u", "3"))),
		db.Append(ctx, retry(text("g", "u", "new"))),
		db.Append(ctx, retry(reaction("g", "v", "r2", 2, "🎉", true))),
		db.Append(ctx, text("g", "u", "4")),
	}
	want := []struct {
		seq int64
		dup bool
	}{{1, true}, {3, true}, {4, false}, {4, true}, {0, false}, {0, false}, {5, false}}
	for i, p := range pend {
		m, dup, err := p()
		if want[i].seq == 0 {
			if e, ok := err.(*chat.Error); !ok || e != over {
				t.Errorf("send %d, no retry: got %+v, %v; want the RetryOnly error", i, m, err)
			}
			continue
		}
		if err != nil || m.Seq != want[i].seq || dup != want[i].dup {
			t.Errorf("send %d: got seq %d dup %v %v; want seq %d dup %v", i, m.Seq, dup, err, want[i].seq, want[i].dup)
		}
	}
	if got := allSeqs(t, db, "g", "u"); !slices.Equal(got, []int64{1, 2, 3, 4, 5}) {
		t.Errorf("stored seqs: got %v, want [1 2 3 4 5]", got)
	}
	if p := page(t, db, "g", "u"); len(p[2].Reactions) != 0 {
		t.Errorf("the refused reaction changed its target: %+v", p[2])
	}
}

// testRosterVersion: every join, leave or kick moves the roster's
// Version, and a committed message carries the Version its transaction
// saw, so that members read before a kick are known to be older than a
// message committed after it.
func testRosterVersion(t *testing.T, o Opener) {
	ctx := context.Background()
	var mu sync.Mutex
	var committed []chat.Message
	db := open(t, o, Options{OnCommit: func(ms []chat.Message) {
		mu.Lock()
		committed = append(committed, ms...)
		mu.Unlock()
	}})
	version := func() int64 {
		t.Helper()
		r, err := db.Roster(ctx, "g")
		must(t, err)
		return r.Version
	}
	sent := func(id string) int64 {
		t.Helper()
		m, _, err := db.Append(ctx, text("g", "u", id))()
		must(t, err)
		// The hook may run just after the sender is answered.
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			mu.Lock()
			for _, c := range committed {
				if c.Seq == m.Seq {
					mu.Unlock()
					return c.RosterV
				}
			}
			mu.Unlock()
		}
		t.Fatalf("message %d was not handed to the commit hook", m.Seq)
		return 0
	}
	must(t, db.CreateGroup(ctx, "g", "g", "u", []string{"v"}))
	v0 := version()
	if got := sent("1"); got != v0 {
		t.Errorf("a message before any change carries %d, want %d", got, v0)
	}
	_, err := db.AddMembers(ctx, "g", []string{"w"})
	must(t, err)
	v1 := version()
	must(t, db.KickMember(ctx, "g", "u", "w"))
	v3 := version()
	if !(v0 < v1 && v1 < v3) {
		t.Errorf("versions across a join and a kick: %d %d %d, want increasing", v0, v1, v3)
	}
	if got := sent("2"); got != v3 {
		t.Errorf("a message after the changes carries %d, want %d", got, v3)
	}
	must(t, db.RemoveMember(ctx, "g", "v"))
	if v4, got := version(), sent("3"); v4 <= v3 || got != v4 {
		t.Errorf("after a leave: version %d (before %d), message carries %d", v4, v3, got)
	}
}

// testSeqsAfterReopen: seqs resume above what is stored.
func testSeqsAfterReopen(t *testing.T, o Opener) {
	ctx := context.Background()
	for round := range 2 {
		db, closeFn := o(t, Options{})
		if round == 0 {
			must(t, db.CreateGroup(ctx, "g", "g", "u", nil))
		}
		for i := range 3 {
			m, _, err := db.Append(ctx, text("g", "u", fmt.Sprint(round, i)))()
			if want := int64(round*3 + i + 1); err != nil || m.Seq != want {
				t.Fatalf("round %d: got seq %d, %v; want %d", round, m.Seq, err, want)
			}
		}
		// A retry after the reopen is still a duplicate.
		if round == 1 {
			m, dup, err := db.Append(ctx, text("g", "u", fmt.Sprint(0, 0)))()
			if err != nil || !dup || m.Seq != 1 {
				t.Errorf("retry after reopen: seq %d dup %v %v", m.Seq, dup, err)
			}
		}
		closeFn()
	}
}

// testMembershipChangeInsideBatch puts messages, a kick, a join and more
// messages into one transaction: the kicked member's range ends at the
// last message before the kick, the new member's starts after it, and the
// kicked member's later send fails.
func testMembershipChangeInsideBatch(t *testing.T, o Opener) {
	ctx := context.Background()
	db := open(t, o, Options{BatchDelay: 300 * time.Millisecond})
	must(t, db.CreateGroup(ctx, "g", "g", "owner", []string{"x"}))
	send := func(from, id string) chat.Pending { return db.Append(ctx, text("g", from, id)) }
	first := send("x", "x1")
	time.Sleep(20 * time.Millisecond)
	second := send("owner", "o1")
	time.Sleep(20 * time.Millisecond)
	kicked := make(chan error, 1)
	go func() { kicked <- db.RemoveMember(ctx, "g", "x") }()
	time.Sleep(20 * time.Millisecond)
	joined := make(chan error, 1)
	go func() { _, err := db.AddMembers(ctx, "g", []string{"late"}); joined <- err }()
	time.Sleep(20 * time.Millisecond)
	third := send("x", "x2")
	fourth := send("owner", "o2")

	m1, _, err1 := first()
	m2, _, err2 := second()
	_, _, err3 := third()
	m4, _, err4 := fourth()
	if err1 != nil || err2 != nil || err4 != nil || <-kicked != nil || <-joined != nil {
		t.Fatalf("errors: %v %v %v", err1, err2, err4)
	}
	wantCode(t, "send after the kick", err3, chat.ENotMember)
	if m1.Seq != 1 || m2.Seq != 2 || m4.Seq != 3 {
		t.Fatalf("seqs %d %d %d, want 1 2 3", m1.Seq, m2.Seq, m4.Seq)
	}
	x, err := db.Membership(ctx, "g", "x")
	must(t, err)
	if !x.Left || x.MaxSeq != 2 {
		t.Errorf("kicked member: left %v, max_seq %d; want true, 2", x.Left, x.MaxSeq)
	}
	late, err := db.Membership(ctx, "g", "late")
	must(t, err)
	if late.MinSeq != 3 || late.Left {
		t.Errorf("late member: min_seq %d left %v, want 3, false", late.MinSeq, late.Left)
	}
	if got := allSeqs(t, db, "g", "x"); fmt.Sprint(got) != "[1 2]" {
		t.Errorf("kicked member sees %v, want [1 2]", got)
	}
	if got := allSeqs(t, db, "g", "late"); fmt.Sprint(got) != "[3]" {
		t.Errorf("late member sees %v, want [3]", got)
	}
}

// testOnCommitOrder: every stored message reaches the commit hook once,
// in seq order per conversation, and duplicates never do.
func testOnCommitOrder(t *testing.T, o Opener) {
	ctx := context.Background()
	var mu sync.Mutex
	seen := map[string][]int64{}
	db := open(t, o, Options{OnCommit: func(ms []chat.Message) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range ms {
			seen[m.Conv] = append(seen[m.Conv], m.Seq)
		}
	}})
	must(t, db.CreateGroup(ctx, "a", "a", "u", nil))
	must(t, db.CreateGroup(ctx, "b", "b", "u", nil))
	var ps []chat.Pending
	for i := range 200 {
		ps = append(ps, db.Append(ctx, text([]string{"a", "b"}[i%2], "u", fmt.Sprint(i/4))))
	}
	for _, p := range ps {
		if _, _, err := p(); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, c := range []string{"a", "b"} {
		got := seen[c]
		if len(got) != 50 {
			t.Errorf("%s: hook saw %d messages, want 50", c, len(got))
		}
		for i, s := range got {
			if s != int64(i+1) {
				t.Fatalf("%s: hook saw %v", c, got)
			}
		}
	}
}

func testUsers(t *testing.T, o Opener) {
	ctx := context.Background()
	db := open(t, o, Options{})
	must(t, db.CreateUser(ctx, chat.User{ID: "1", Username: "Alice", DisplayName: "Alice A"}, "h1"))
	must(t, db.CreateUser(ctx, chat.User{ID: "2", Username: "al_x", DisplayName: "X"}, "h2"))
	must(t, db.CreateUser(ctx, chat.User{ID: "3", Username: "bob", DisplayName: "Bob"}, "h3"))
	wantCode(t, "same name other case", db.CreateUser(ctx, chat.User{ID: "4", Username: "ALICE", DisplayName: "?"}, "h"), chat.EConflict)
	u, hash, err := db.UserByName(ctx, "alice")
	if err != nil || u.ID != "1" || hash != "h1" || u.Username != "Alice" {
		t.Errorf("by name: %+v %q %v", u, hash, err)
	}
	_, _, err = db.UserByName(ctx, "nobody")
	wantCode(t, "unknown name", err, chat.ENotFound)
	if u, err := db.UserByID(ctx, "3"); err != nil || u.DisplayName != "Bob" {
		t.Errorf("by id: %+v %v", u, err)
	}
	_, err = db.UserByID(ctx, "9")
	wantCode(t, "unknown id", err, chat.ENotFound)
	names := func(us []chat.User, err error) string {
		must(t, err)
		s := ""
		for _, u := range us {
			s += u.Username + ","
		}
		return s
	}
	if got := names(db.SearchUsers(ctx, "AL", 10)); got != "al_x,Alice," {
		t.Errorf("search AL: %s", got)
	}
	if got := names(db.SearchUsers(ctx, "al_", 10)); got != "al_x," {
		t.Errorf("search al_ (no wildcard): %s", got)
	}
	if got := names(db.SearchUsers(ctx, "%", 10)); got != "" {
		t.Errorf("search %%: %s", got)
	}
	if got := names(db.SearchUsers(ctx, "", 2)); got != "al_x,Alice," {
		t.Errorf("search limit: %s", got)
	}
	must(t, db.SetPassword(ctx, "1", "new"))
	if _, hash, _ := db.UserByName(ctx, "Alice"); hash != "new" {
		t.Errorf("password: %q", hash)
	}
}

func testTokens(t *testing.T, o Opener) {
	ctx := context.Background()
	db := open(t, o, Options{})
	must(t, db.CreateUser(ctx, chat.User{ID: "1", Username: "a", DisplayName: "A"}, "h"))
	must(t, db.CreateToken(ctx, "1", []byte{1, 2, 3}, chat.Session{ID: "s1", CreatedAt: 1, LastUsedAt: 1}))
	must(t, db.CreateToken(ctx, "1", []byte{4}, chat.Session{ID: "s2", CreatedAt: 2, LastUsedAt: 2}))
	if u, err := db.UserByToken(ctx, []byte{1, 2, 3}); err != nil || u.ID != "1" {
		t.Errorf("token: %+v %v", u, err)
	}
	must(t, db.TouchSessions(ctx, []chat.SessionUse{{TokenHash: []byte{1, 2, 3}, LastUsedAt: 9, UserAgent: "ua"}}))
	if u, sess, err := db.SessionByToken(ctx, []byte{1, 2, 3}); err != nil || u.ID != "1" || sess.ID != "s1" || sess.LastUsedAt != 9 || sess.UserAgent != "ua" {
		t.Errorf("session: %+v %+v %v", u, sess, err)
	}
	if list, err := db.Sessions(ctx, "1"); err != nil || len(list) != 2 || list[0].ID != "s1" {
		t.Errorf("sessions: %+v %v", list, err)
	}
	must(t, db.CreateTicket(ctx, []byte("tk"), "1", []byte{1, 2, 3}, 1<<62))
	must(t, db.CreateTicket(ctx, []byte("old"), "1", []byte{1, 2, 3}, 4))
	// Looking does not use it up; an expired or unknown one is not found.
	for range 2 {
		if h, err := db.TicketToken(ctx, []byte("tk"), 5); err != nil || string(h) != "\x01\x02\x03" {
			t.Errorf("ticket looked at: %v %v", h, err)
		}
	}
	_, err := db.TicketToken(ctx, []byte("old"), 5)
	wantCode(t, "expired ticket looked at", err, chat.ENotFound)
	_, err = db.TicketToken(ctx, []byte("nope"), 5)
	wantCode(t, "unknown ticket looked at", err, chat.ENotFound)
	if h, err := db.UseTicket(ctx, []byte("tk"), 5); err != nil || string(h) != "\x01\x02\x03" {
		t.Errorf("ticket: %v %v", h, err)
	}
	_, err = db.UseTicket(ctx, []byte("tk"), 5)
	wantCode(t, "ticket used twice", err, chat.ENotFound)
	_, err = db.TicketToken(ctx, []byte("tk"), 5)
	wantCode(t, "used ticket looked at", err, chat.ENotFound)
	_, err = db.DeleteSession(ctx, "1", "nope")
	wantCode(t, "unknown session", err, chat.ENotFound)
	must(t, db.DeleteToken(ctx, []byte{1, 2, 3}))
	_, err = db.UserByToken(ctx, []byte{1, 2, 3})
	wantCode(t, "deleted token", err, chat.ENotFound)
	must(t, db.DeleteUserTokens(ctx, "1"))
	_, err = db.UserByToken(ctx, []byte{4})
	wantCode(t, "user's tokens deleted", err, chat.ENotFound)
}

func testDirectAndEntries(t *testing.T, o Opener) {
	ctx := context.Background()
	db := open(t, o, Options{})
	must(t, db.CreateUser(ctx, chat.User{ID: "a", Username: "ann", DisplayName: "Ann"}, "h"))
	must(t, db.CreateUser(ctx, chat.User{ID: "b", Username: "ben", DisplayName: "Ben"}, "h"))
	id, created, err := db.CreateDirect(ctx, "d1", "b", "a")
	if err != nil || !created || id != "d1" {
		t.Fatalf("create direct: %s %v %v", id, created, err)
	}
	id, created, err = db.CreateDirect(ctx, "d2", "a", "b")
	if err != nil || created || id != "d1" {
		t.Fatalf("again: %s %v %v", id, created, err)
	}
	for i := range 3 {
		_, _, err := db.Append(ctx, text("d1", "a", fmt.Sprint(i)))()
		must(t, err)
	}
	c, err := db.Conversation(ctx, "d1", "b")
	must(t, err)
	if c.Kind != chat.Direct || c.Peer == nil || c.Peer.ID != "a" || c.Name != "Ann" || c.MaxSeq != 3 || c.Unread != 3 ||
		c.LastMessage == nil || c.LastMessage.Seq != 3 || c.LastMessage.Body != "body 2" || c.MembersCount != 2 || c.Role != chat.RoleMember {
		t.Errorf("entry of b: %+v", c)
	}
	c, err = db.Conversation(ctx, "d1", "a")
	must(t, err)
	if c.Unread != 0 || c.ReadSeq != 0 || c.LastAckSeq != 0 {
		t.Errorf("the sender's own texts are not unread, and a send moves no marker: %+v", c)
	}
	// Unread counts the text messages of others only (PROTOCOL.md v1.1),
	// whoever sent last.
	for i := range 2 {
		_, _, err := db.Append(ctx, text("d1", "b", fmt.Sprint("b", i)))()
		must(t, err)
	}
	_, _, err = db.Append(ctx, text("d1", "a", "a3"))()
	must(t, err)
	for user, want := range map[string]int64{"a": 2, "b": 4} {
		c, err = db.Conversation(ctx, "d1", user)
		must(t, err)
		if c.Unread != want || c.ReadSeq != 0 {
			t.Errorf("%s after both sent: unread %d, read_seq %d; want %d, 0", user, c.Unread, c.ReadSeq, want)
		}
	}
	// A read marker among a's own texts leaves those after it out.
	if _, _, err := db.SetRead(ctx, "d1", "a", 2); err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.SetRead(ctx, "d1", "b", 4); err != nil {
		t.Fatal(err)
	}
	for user, want := range map[string]int64{"a": 2, "b": 1} {
		c, err = db.Conversation(ctx, "d1", user)
		must(t, err)
		if c.Unread != want {
			t.Errorf("%s after reading: unread %d, want %d", user, c.Unread, want)
		}
	}
	// A deleted text of a's past its marker counts for nobody.
	_, _, err = db.Append(ctx, chat.Message{Conv: "d1", From: "a", ClientMsgID: "del6", Kind: chat.KindDelete, Target: 6})()
	must(t, err)
	for user, want := range map[string]int64{"a": 2, "b": 0} {
		c, err = db.Conversation(ctx, "d1", user)
		must(t, err)
		if c.Unread != want {
			t.Errorf("%s after a deleted its text 6: unread %d, want %d", user, c.Unread, want)
		}
	}
	_, err = db.Conversation(ctx, "d1", "z")
	wantCode(t, "stranger", err, chat.ENotMember)
	_, err = db.Conversation(ctx, "zz", "a")
	wantCode(t, "missing", err, chat.ENotFound)
	_, err = db.Membership(ctx, "zz", "a")
	wantCode(t, "membership missing", err, chat.ENotFound)
	_, err = db.Membership(ctx, "d1", "z")
	wantCode(t, "membership stranger", err, chat.ENotMember)
	r, err := db.Roster(ctx, "d1")
	must(t, err)
	if r.Kind != chat.Direct || len(r.Members) != 2 || !r.Has("a") || !r.Has("b") {
		t.Errorf("roster: %+v", r)
	}
	_, err = db.Roster(ctx, "zz")
	wantCode(t, "roster missing", err, chat.ENotFound)
}

// testVersionsSync: every change a user should hear of gives its entry a
// version above all earlier ones, and a sync after V returns exactly the
// entries changed since, in version order, pageable.
func testVersionsSync(t *testing.T, o Opener) {
	ctx := context.Background()
	db := open(t, o, Options{})
	for i := range 5 {
		must(t, db.CreateGroup(ctx, fmt.Sprint("g", i), fmt.Sprint("G", i), "u", []string{"v"}))
	}
	v0, err := db.MaxVersion(ctx, "v")
	must(t, err)
	if v0 == 0 {
		t.Fatal("max version 0 after joining groups")
	}
	_, _, err = db.Append(ctx, text("g1", "u", "x"))()
	must(t, err)
	_, err = db.AddMembers(ctx, "g3", []string{"w"})
	must(t, err)
	ch, err := db.ConversationsSince(ctx, "v", v0, 100)
	must(t, err)
	if len(ch.Conversations) != 2 || ch.Conversations[0].ID != "g1" || ch.Conversations[1].ID != "g3" || !ch.Completed {
		t.Fatalf("since %d: %+v", v0, ch)
	}
	if ch.Conversations[0].Version <= v0 || ch.Conversations[1].Version <= ch.Conversations[0].Version || ch.MaxVersion != ch.Conversations[1].Version {
		t.Errorf("versions: %d %d max %d (since %d)", ch.Conversations[0].Version, ch.Conversations[1].Version, ch.MaxVersion, v0)
	}
	if ch.Conversations[1].MembersCount != 3 {
		t.Errorf("members count after add: %d", ch.Conversations[1].MembersCount)
	}
	// Pages of 2 from 0 walk all five in version order.
	var got []string
	since := int64(0)
	for range 5 {
		ch, err := db.ConversationsSince(ctx, "v", since, 2)
		must(t, err)
		for _, c := range ch.Conversations {
			got = append(got, c.ID)
			since = c.Version
		}
		if ch.Completed {
			break
		}
	}
	if fmt.Sprint(got) != "[g0 g2 g4 g1 g3]" {
		t.Errorf("paged sync: %v", got)
	}
	// Leaving is a change too; the entry stays, marked left.
	before, _ := db.MaxVersion(ctx, "v")
	must(t, db.RemoveMember(ctx, "g0", "v"))
	ch, err = db.ConversationsSince(ctx, "v", before, 10)
	must(t, err)
	if len(ch.Conversations) != 1 || !ch.Conversations[0].Left || ch.Conversations[0].ID != "g0" {
		t.Errorf("after leaving: %+v", ch)
	}
	wantCode(t, "leave twice", db.RemoveMember(ctx, "g0", "v"), chat.ENotMember)
	// A message after leaving moves nothing for the one who left.
	after, _ := db.MaxVersion(ctx, "v")
	_, _, err = db.Append(ctx, text("g0", "u", "y"))()
	must(t, err)
	if v, _ := db.MaxVersion(ctx, "v"); v != after {
		t.Errorf("version moved for a former member: %d -> %d", after, v)
	}
}

func testReadsAndAcks(t *testing.T, o Opener) {
	ctx := context.Background()
	db := open(t, o, Options{})
	must(t, db.CreateGroup(ctx, "g", "g", "u", []string{"v"}))
	for i := range 5 {
		_, _, err := db.Append(ctx, text("g", "u", fmt.Sprint(i)))()
		must(t, err)
	}
	read, moved, err := db.SetRead(ctx, "g", "v", 3)
	if err != nil || read != 3 || !moved {
		t.Errorf("read 3: %d %v %v", read, moved, err)
	}
	read, moved, err = db.SetRead(ctx, "g", "v", 2)
	if err != nil || read != 3 || moved {
		t.Errorf("read back to 2: %d %v %v", read, moved, err)
	}
	read, moved, err = db.SetRead(ctx, "g", "v", 99)
	if err != nil || read != 5 || !moved {
		t.Errorf("read past the end is clamped: %d %v %v", read, moved, err)
	}
	_, _, err = db.SetRead(ctx, "g", "z", 1)
	wantCode(t, "stranger reads", err, chat.ENotMember)
	must(t, db.SaveAcks(ctx, []chat.Ack{{Conv: "g", User: "v", Seq: 4}, {Conv: "g", User: "v", Seq: 2}, {Conv: "g", User: "z", Seq: 1}, {Conv: "nope", User: "v", Seq: 1}}))
	must(t, db.SaveAcks(ctx, []chat.Ack{{Conv: "g", User: "v", Seq: 1}}))
	r, err := db.Roster(ctx, "g")
	must(t, err)
	for _, m := range r.Members {
		if m.UserID == "v" && (m.LastAckSeq != 4 || m.ReadSeq != 5) {
			t.Errorf("v: ack %d read %d, want 4, 5", m.LastAckSeq, m.ReadSeq)
		}
	}
	must(t, db.SaveAcks(ctx, []chat.Ack{{Conv: "g", User: "v", Seq: 1000}}))
	c, err := db.Conversation(ctx, "g", "v")
	must(t, err)
	if c.LastAckSeq != 5 || c.Unread != 0 {
		t.Errorf("ack is clamped to what exists: %+v", c)
	}
}

func testClearHistory(t *testing.T, o Opener) {
	ctx := context.Background()
	db := open(t, o, Options{})
	must(t, db.CreateGroup(ctx, "g", "g", "u", []string{"v"}))
	for i := range 4 {
		_, _, err := db.Append(ctx, text("g", "u", fmt.Sprint(i)))()
		must(t, err)
	}
	must(t, db.ClearHistory(ctx, "g", "v"))
	if got := allSeqs(t, db, "g", "v"); len(got) != 0 {
		t.Errorf("after clear: %v", got)
	}
	c, err := db.Conversation(ctx, "g", "v")
	must(t, err)
	if c.MinSeq != 5 || c.Unread != 0 || c.LastMessage != nil {
		t.Errorf("entry after clear: %+v", c)
	}
	_, _, err = db.Append(ctx, text("g", "u", "after"))()
	must(t, err)
	if got := allSeqs(t, db, "g", "v"); fmt.Sprint(got) != "[5]" {
		t.Errorf("after clear and a send: %v", got)
	}
	if got := allSeqs(t, db, "g", "u"); len(got) != 5 {
		t.Errorf("the other member still sees all: %v", got)
	}
	wantCode(t, "stranger clears", db.ClearHistory(ctx, "g", "z"), chat.ENotMember)
}

func testPaging(t *testing.T, o Opener) {
	ctx := context.Background()
	db := open(t, o, Options{})
	must(t, db.CreateGroup(ctx, "g", "g", "u", nil))
	for i := range 10 {
		_, _, err := db.Append(ctx, text("g", "u", fmt.Sprint(i)))()
		must(t, err)
	}
	seqs := func(p chat.Page, err error) string {
		must(t, err)
		s := fmt.Sprint(p.Completed, p.MaxSeq)
		for _, m := range p.Messages {
			s += fmt.Sprint(" ", m.Seq)
		}
		return s
	}
	for _, tc := range []struct {
		q    chat.PageQuery
		want string
	}{
		{chat.PageQuery{After: 0, Limit: 3}, "false 10 1 2 3"},
		{chat.PageQuery{After: 7, Limit: 3}, "true 10 8 9 10"},
		{chat.PageQuery{After: 10, Limit: 3}, "true 10"},
		{chat.PageQuery{Backward: true, Before: 11, Limit: 3}, "false 10 8 9 10"},
		{chat.PageQuery{Backward: true, Before: 4, Limit: 3}, "true 10 1 2 3"},
		{chat.PageQuery{Backward: true, Before: 1 << 60, Limit: 2}, "false 10 9 10"},
	} {
		if got := seqs(db.Messages(ctx, "g", "u", tc.q)); got != tc.want {
			t.Errorf("%+v: got %s, want %s", tc.q, got, tc.want)
		}
	}
	p, err := db.Messages(ctx, "g", "u", chat.PageQuery{After: 0, Limit: 1})
	must(t, err)
	if m := p.Messages[0]; m.From != "u" || m.ClientMsgID != "0" || m.Kind != chat.KindText || m.Body != "body 0" || m.TS == 0 || m.Conv != "g" {
		t.Errorf("message: %+v", m)
	}
	_, err = db.Messages(ctx, "g", "z", chat.PageQuery{Limit: 1})
	wantCode(t, "stranger pages", err, chat.ENotMember)
	_, err = db.Messages(ctx, "zz", "u", chat.PageQuery{Limit: 1})
	wantCode(t, "missing conversation", err, chat.ENotFound)
}

// testRemoveOwner: when the owner leaves, an admin or else the
// longest-standing member becomes owner.
func testRemoveOwner(t *testing.T, o Opener) {
	ctx := context.Background()
	db := open(t, o, Options{})
	must(t, db.CreateGroup(ctx, "g", "g", "o", []string{"a"}))
	_, err := db.AddMembers(ctx, "g", []string{"b"})
	must(t, err)
	added, err := db.AddMembers(ctx, "g", []string{"a", "c"})
	must(t, err)
	if fmt.Sprint(added) != "[c]" {
		t.Errorf("added: %v", added)
	}
	must(t, db.RemoveMember(ctx, "g", "o"))
	r, err := db.Roster(ctx, "g")
	must(t, err)
	if r.Role("a") != chat.RoleOwner || r.Has("o") || len(r.Members) != 3 {
		t.Errorf("roster after the owner left: %+v", r)
	}
	// A former member comes back with a fresh range.
	_, _, err = db.Append(ctx, text("g", "a", "1"))()
	must(t, err)
	added, err = db.AddMembers(ctx, "g", []string{"o"})
	must(t, err)
	if fmt.Sprint(added) != "[o]" {
		t.Errorf("rejoin: %v", added)
	}
	ms, err := db.Membership(ctx, "g", "o")
	must(t, err)
	if ms.Left || ms.MinSeq != 2 || ms.Role != chat.RoleMember {
		t.Errorf("rejoined: %+v", ms)
	}
	_, err = db.AddMembers(ctx, "nope", []string{"o"})
	if err == nil {
		t.Error("adding to a missing conversation: no error")
	}
}

// testSetRole: only the owner changes roles, and only an owner or admin
// removes members (the owner nobody), checked in the store's own transaction; a hand-over
// leaves one owner, also when two race, and gives both rows a new version.
func testSetRole(t *testing.T, o Opener) {
	ctx := context.Background()
	db := open(t, o, Options{})
	must(t, db.CreateGroup(ctx, "g", "g", "o", []string{"a", "b", "c"}))
	wantCode(t, "a member changing a role", db.SetRole(ctx, "g", "a", "b", chat.RoleAdmin), chat.EForbidden)
	wantCode(t, "a stranger changing a role", db.SetRole(ctx, "g", "x", "b", chat.RoleAdmin), chat.ENotMember)
	wantCode(t, "the role of a stranger", db.SetRole(ctx, "g", "o", "x", chat.RoleAdmin), chat.ENotFound)
	wantCode(t, "the owner's own role", db.SetRole(ctx, "g", "o", "o", chat.RoleMember), chat.EBadRequest)
	wantCode(t, "an unknown role", db.SetRole(ctx, "g", "o", "a", "king"), chat.EBadRequest)
	wantCode(t, "a member removing one", db.KickMember(ctx, "g", "b", "c"), chat.EForbidden)
	must(t, db.SetRole(ctx, "g", "o", "a", chat.RoleAdmin))
	wantCode(t, "an admin changing a role", db.SetRole(ctx, "g", "a", "b", chat.RoleAdmin), chat.EForbidden)
	must(t, db.SetRole(ctx, "g", "o", "b", chat.RoleAdmin))
	// Admins remove admins (PROTOCOL.md: "owner/admin only"), never the owner.
	wantCode(t, "an admin removing the owner", db.KickMember(ctx, "g", "a", "o"), chat.EForbidden)
	must(t, db.KickMember(ctx, "g", "a", "b"))
	_, err := db.AddMembers(ctx, "g", []string{"b"})
	must(t, err)
	// Demoted, a's rights go with the role.
	must(t, db.SetRole(ctx, "g", "o", "a", chat.RoleMember))
	wantCode(t, "a demoted admin removing a member", db.KickMember(ctx, "g", "a", "c"), chat.EForbidden)
	must(t, db.SetRole(ctx, "g", "o", "a", chat.RoleAdmin))
	must(t, db.KickMember(ctx, "g", "a", "c"))
	wantCode(t, "removing a member who left", db.KickMember(ctx, "g", "a", "c"), chat.ENotFound)

	oldBefore, err := db.Conversation(ctx, "g", "o")
	must(t, err)
	newBefore, err := db.Conversation(ctx, "g", "b")
	must(t, err)
	must(t, db.SetRole(ctx, "g", "o", "b", chat.RoleOwner))
	r, err := db.Roster(ctx, "g")
	must(t, err)
	if r.Role("o") != chat.RoleAdmin || r.Role("a") != chat.RoleAdmin || r.Role("b") != chat.RoleOwner {
		t.Errorf("roster after the hand-over: %+v", r)
	}
	oldAfter, err := db.Conversation(ctx, "g", "o")
	must(t, err)
	newAfter, err := db.Conversation(ctx, "g", "b")
	must(t, err)
	if oldAfter.Version <= oldBefore.Version || newAfter.Version <= newBefore.Version || oldAfter.Role != chat.RoleAdmin || newAfter.Role != chat.RoleOwner {
		t.Errorf("entries after the hand-over: old owner %+v, then %+v; new owner %+v, then %+v", oldBefore, oldAfter, newBefore, newAfter)
	}
	wantCode(t, "the old owner changing a role", db.SetRole(ctx, "g", "o", "a", chat.RoleMember), chat.EForbidden)
	// A member who left keeps its last role and can no longer be given one.
	must(t, db.RemoveMember(ctx, "g", "a"))
	wantCode(t, "the role of a member who left", db.SetRole(ctx, "g", "b", "a", chat.RoleMember), chat.ENotFound)

	// Two hand-overs by one owner at once: one wins, the other finds its
	// maker no longer owner.
	for i := range 10 {
		g := fmt.Sprintf("race%d", i)
		must(t, db.CreateGroup(ctx, g, g, "o", []string{"p", "q"}))
		errs := make(chan error, 2)
		for _, to := range []string{"p", "q"} {
			go func() { errs <- db.SetRole(ctx, g, "o", to, chat.RoleOwner) }()
		}
		won := 0
		for range 2 {
			if err := <-errs; err == nil {
				won++
			} else if chat.ErrorCode(err) != chat.EForbidden {
				t.Fatalf("%s: a losing hand-over: %v", g, err)
			}
		}
		r, err := db.Roster(ctx, g)
		must(t, err)
		owners := 0
		for _, m := range r.Members {
			if m.Role == chat.RoleOwner {
				owners++
			}
		}
		if won != 1 || owners != 1 {
			t.Errorf("%s: %d hand-overs went through, %d owners: %+v", g, won, owners, r.Members)
		}
	}
}

func testDeleteUser(t *testing.T, o Opener) {
	ctx := context.Background()
	db := open(t, o, Options{})
	must(t, db.CreateUser(ctx, chat.User{ID: "x", Username: "x", DisplayName: "X"}, "h"))
	must(t, db.CreateToken(ctx, "x", []byte("t"), chat.Session{ID: "sx"}))
	must(t, db.CreateGroup(ctx, "g", "g", "x", []string{"y"}))
	_, _, err := db.Append(ctx, text("g", "x", "1"))()
	must(t, err)
	must(t, db.DeleteUser(ctx, "x"))
	_, err = db.UserByID(ctx, "x")
	wantCode(t, "deleted user", err, chat.ENotFound)
	_, err = db.UserByToken(ctx, []byte("t"))
	wantCode(t, "deleted user's token", err, chat.ENotFound)
	r, err := db.Roster(ctx, "g")
	must(t, err)
	if r.Has("x") || r.Role("y") != chat.RoleOwner {
		t.Errorf("roster: %+v", r)
	}
	if got := allSeqs(t, db, "g", "y"); len(got) != 1 {
		t.Errorf("messages stay: %v", got)
	}
}
