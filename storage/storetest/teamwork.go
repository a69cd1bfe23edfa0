package storetest

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/imserver/imserver/chat"
)

// The v1.1 contract: mutations, replies, mentions and search, as both
// stores must apply them inside the write transaction.

func mutation(conv, from, id, kind string, target int64, body string) chat.Message {
	return chat.Message{Conv: conv, From: from, ClientMsgID: id, Kind: kind, Target: target, Body: body}
}

func reaction(conv, from, id string, target int64, emoji string, on bool) chat.Message {
	return chat.Message{Conv: conv, From: from, ClientMsgID: id, Kind: chat.KindReaction, Target: target, Emoji: emoji, On: &on}
}

// page reads every message of conv user may see, folded.
func page(t *testing.T, s chat.Store, conv, user string) map[int64]chat.Message {
	t.Helper()
	p, err := s.Messages(context.Background(), conv, user, chat.PageQuery{Limit: 1000})
	must(t, err)
	out := make(map[int64]chat.Message)
	for _, m := range p.Messages {
		out[m.Seq] = m
	}
	return out
}

// search returns the seqs the query finds for user, newest first.
func search(t *testing.T, s chat.Store, user, q, conv string) []int64 {
	t.Helper()
	sq, err := chat.ParseSearch(q)
	must(t, err)
	sq.Conv, sq.Limit = conv, 20
	res, err := s.Search(context.Background(), user, sq)
	must(t, err)
	var seqs []int64
	for _, h := range res.Results {
		seqs = append(seqs, h.Message.Seq)
	}
	return seqs
}

// testReactionOrder: a message's reactions are ordered by first use
// (PROTOCOL.md v1.1), as a client folding the stream holds them: an emoji
// keeps its place while anyone still reacts with it, whoever reacted
// first; one taken back by everyone and used again goes last. Users are in
// the order they reacted.
func testReactionOrder(t *testing.T, o Opener) {
	ctx := context.Background()
	db := open(t, o, Options{})
	must(t, db.CreateGroup(ctx, "g", "g", "a", []string{"b", "c"}))
	send := func(m chat.Message) {
		t.Helper()
		_, _, err := db.Append(ctx, m)()
		must(t, err)
	}
	send(text("g", "a", "t1"))
	check := func(step string, want ...string) {
		t.Helper()
		var got []string
		for _, r := range page(t, db, "g", "a")[1].Reactions {
			got = append(got, r.Emoji+":"+strings.Join(r.Users, ","))
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: reactions %v, want %v", step, got, want)
		}
	}
	send(reaction("g", "b", "r1", 1, "+1", true))
	send(reaction("g", "c", "r2", 1, "tada", true))
	send(reaction("g", "c", "r3", 1, "+1", true))
	check("three reactions", "+1:b,c", "tada:c")
	send(reaction("g", "b", "r4", 1, "+1", false))
	check("the first +1 taken back", "+1:c", "tada:c")
	send(reaction("g", "b", "r5", 1, "+1", true))
	check("+1 again", "+1:c,b", "tada:c")
	send(reaction("g", "b", "r6", 1, "+1", false))
	send(reaction("g", "c", "r7", 1, "+1", false))
	send(reaction("g", "a", "r8", 1, "+1", true))
	check("+1 gone and used again", "tada:c", "+1:a")
}

// testSelfMention: a member who mentions itself in its own text or edit
// has no unread mention from it (its own message is never unread).
func testSelfMention(t *testing.T, o Opener) {
	ctx := context.Background()
	db := open(t, o, Options{})
	must(t, db.CreateGroup(ctx, "g", "g", "u", []string{"v"}))
	m := text("g", "v", "v1")
	m.Mentions = []string{"v", "u"}
	got, _, err := db.Append(ctx, m)()
	must(t, err)
	e := mutation("g", "v", "e1", chat.KindEdit, got.Seq, "again")
	e.Mentions = []string{"v"}
	_, _, err = db.Append(ctx, e)()
	must(t, err)
	mentions := func(user string) int64 {
		t.Helper()
		c, err := db.Conversation(ctx, "g", user)
		must(t, err)
		return c.Mentions
	}
	if v, u := mentions("v"), mentions("u"); v != 0 || u != 0 {
		t.Errorf("after v mentioned itself (and u, edited away): v %d, u %d; want 0, 0", v, u)
	}
	m = text("g", "v", "v3")
	m.Mentions = []string{"u"}
	_, _, err = db.Append(ctx, m)()
	must(t, err)
	if u := mentions("u"); u != 1 {
		t.Errorf("u's mentions after v mentioned it: %d, want 1", u)
	}
}

// testMutationsInOneBatch queues texts, mutations, replies and refusals
// into one transaction: each sees the effect of those before it, a
// refusal stores nothing and takes no seq, a retry gets the first result.
func testMutationsInOneBatch(t *testing.T, o Opener) {
	ctx := context.Background()
	db := open(t, o, Options{BatchDelay: 50 * time.Millisecond})
	must(t, db.CreateGroup(ctx, "g", "g", "u", []string{"v"}))
	sends := []struct {
		m    chat.Message
		seq  int64
		code string
	}{
		{chat.Message{Conv: "g", From: "u", ClientMsgID: "a", Kind: chat.KindText, Body: "Hello Café world"}, 1, ""},
		{mutation("g", "u", "b", chat.KindEdit, 1, "Hello café edited"), 2, ""},
		{reaction("g", "v", "c", 1, "+1", true), 3, ""},
		{chat.Message{Conv: "g", From: "v", ClientMsgID: "d", Kind: chat.KindText, Body: "re", ReplyTo: 1, Mentions: []string{"u"}}, 4, ""},
		{mutation("g", "v", "e", chat.KindDelete, 1, ""), 0, chat.EForbidden},
		{mutation("g", "v", "f", chat.KindEdit, 1, "mine now"), 0, chat.EForbidden},
		{reaction("g", "v", "g", 1, "+1", true), 0, chat.EConflict},
		{mutation("g", "u", "h", chat.KindEdit, 99, "x"), 0, chat.ENotFound},
		{chat.Message{Conv: "g", From: "v", ClientMsgID: "i", Kind: chat.KindText, Body: "re", ReplyTo: 99}, 0, chat.ENotFound},
		{mutation("g", "u", "j", chat.KindEdit, 3, "edit a reaction"), 0, chat.ENotFound},
		{chat.Message{Conv: "g", From: "v", ClientMsgID: "k", Kind: chat.KindText, Body: "plain text"}, 5, ""},
		{mutation("g", "u", "b", chat.KindEdit, 1, "a retry's body is not stored"), 2, ""},
		{mutation("g", "w", "l", chat.KindEdit, 1, "stranger"), 0, chat.ENotMember},
	}
	var pending []chat.Pending
	for _, s := range sends {
		pending = append(pending, db.Append(ctx, s.m))
	}
	for i, p := range pending {
		m, dup, err := p()
		code := ""
		if err != nil {
			code = chat.ErrorCode(err)
		}
		if s := sends[i]; code != s.code || (s.code == "" && m.Seq != s.seq) {
			t.Errorf("send %d (%s %s): seq %d, %v; want seq %d, %q", i, s.m.ClientMsgID, s.m.Kind, m.Seq, err, s.seq, s.code)
		}
		if i == 11 && (!dup || m.Body != "Hello café edited") {
			t.Errorf("the retry of the edit: dup %v, body %q", dup, m.Body)
		}
	}
	msgs := page(t, db, "g", "v")
	if len(msgs) != 5 {
		t.Fatalf("stored %d messages, want 5", len(msgs))
	}
	first := msgs[1]
	if first.Body != "Hello café edited" || first.EditedAt == 0 || first.Deleted ||
		len(first.Reactions) != 1 || first.Reactions[0].Emoji != "+1" || !slices.Equal(first.Reactions[0].Users, []string{"v"}) {
		t.Errorf("folded message 1: %+v", first)
	}
	if r := msgs[4]; r.ReplyTo != 1 || !slices.Equal(r.Mentions, []string{"u"}) {
		t.Errorf("reply: %+v", r)
	}
	if e := msgs[2]; e.Kind != chat.KindEdit || e.Target != 1 || e.Body != "Hello café edited" {
		t.Errorf("edit message: %+v", e)
	}
	if r := msgs[3]; r.Kind != chat.KindReaction || r.Target != 1 || r.Emoji != "+1" || r.On == nil || !*r.On {
		t.Errorf("reaction message: %+v", r)
	}
	// u last sent seq 2: 3 (a reaction) is not unread, 4 and 5 are, and 4
	// mentions u.
	c, err := db.Conversation(ctx, "g", "u")
	must(t, err)
	if c.Unread != 2 || c.Mentions != 1 || c.LastMessage == nil || c.LastMessage.Seq != 5 {
		t.Errorf("u's entry: unread %d, mentions %d, last %+v", c.Unread, c.Mentions, c.LastMessage)
	}

	// Search: accents and case ignored, the current body only, phrases
	// and prefixes.
	for q, want := range map[string][]int64{
		"cafe":            {1},
		"CAFÉ":            {1},
		"hel*":            {1},
		`"cafe edited"`:   {1},
		`"edited cafe"`:   nil,
		"world":           nil,
		"text":            {5},
		"plain te*":       {5},
		"re":              {4},
		"hello plain":     nil,
		"a retry's":       nil,
		"mine":            nil,
		"edit a reaction": nil,
	} {
		if got := search(t, db, "v", q, ""); !slices.Equal(got, want) {
			t.Errorf("search %q: %v, want %v", q, got, want)
		}
	}
	if got := search(t, db, "v", "re*", "g"); !slices.Equal(got, []int64{4}) {
		t.Errorf("search re* in g: %v", got)
	}

	// A delete erases the body, the edits' bodies, the reactions (the
	// reaction messages' emoji too), the mentions and the search entry;
	// what targets it afterwards conflicts.
	if m, _, err := db.Append(ctx, mutation("g", "u", "m", chat.KindDelete, 1, ""))(); err != nil || m.Seq != 6 {
		t.Fatalf("delete: seq %d, %v", m.Seq, err)
	}
	_, _, err = db.Append(ctx, reaction("g", "v", "n", 1, "+1", false))()
	wantCode(t, "a reaction on a deleted message", err, chat.EConflict)
	_, _, err = db.Append(ctx, mutation("g", "u", "o", chat.KindEdit, 1, "again"))()
	wantCode(t, "an edit of a deleted message", err, chat.EConflict)
	// The group's owner deletes another's message (its mention goes).
	if m, _, err := db.Append(ctx, mutation("g", "u", "p", chat.KindDelete, 4, ""))(); err != nil || m.Seq != 7 {
		t.Fatalf("owner's delete: seq %d, %v", m.Seq, err)
	}
	msgs = page(t, db, "g", "v")
	if m := msgs[1]; !m.Deleted || m.Body != "" || len(m.Reactions) != 0 || m.EditedAt == 0 {
		t.Errorf("deleted message: %+v", m)
	}
	if m := msgs[2]; m.Body != "" {
		t.Errorf("the deleted message's edit keeps its body %q", m.Body)
	}
	if m := msgs[3]; m.Kind != chat.KindReaction || m.Emoji != "" {
		t.Errorf("the deleted message's reaction keeps its emoji: %+v", m)
	}
	if m := msgs[4]; !m.Deleted || m.Body != "" || len(m.Mentions) != 0 {
		t.Errorf("deleted reply: %+v", m)
	}
	for _, q := range []string{"cafe", "hello", "re"} {
		if got := search(t, db, "v", q, ""); len(got) != 0 {
			t.Errorf("search %q after the delete: %v", q, got)
		}
	}
	c, err = db.Conversation(ctx, "g", "v")
	must(t, err)
	if c.Unread != 0 || c.Mentions != 0 || c.LastMessage == nil || c.LastMessage.Seq != 5 {
		t.Errorf("v's entry after the deletes: unread %d, mentions %d, last %+v", c.Unread, c.Mentions, c.LastMessage)
	}
	// In a direct conversation nobody deletes the other's message.
	d, _, err := db.CreateDirect(ctx, "d", "u", "v")
	must(t, err)
	m, _, err := db.Append(ctx, chat.Message{Conv: d, From: "v", ClientMsgID: "q", Kind: chat.KindText, Body: "mine"})()
	must(t, err)
	_, _, err = db.Append(ctx, mutation(d, "u", "r", chat.KindDelete, m.Seq, ""))()
	wantCode(t, "delete of the peer's message in a direct conversation", err, chat.EForbidden)
}

// testSearchVisibleRanges: search finds only what the user may see: from
// its min_seq (join, clear) up to where it left, per conversation, and
// pages with before_seq.
func testSearchVisibleRanges(t *testing.T, o Opener) {
	ctx := context.Background()
	db := open(t, o, Options{})
	must(t, db.CreateGroup(ctx, "g", "g", "u", []string{"v"}))
	must(t, db.CreateGroup(ctx, "h", "h", "u", nil))
	send := func(conv, from, id, body string) int64 {
		m, _, err := db.Append(ctx, chat.Message{Conv: conv, From: from, ClientMsgID: id, Kind: chat.KindText, Body: body})()
		must(t, err)
		return m.Seq
	}
	send("g", "u", "1", "apple one")
	send("h", "u", "1", "apple in h")
	must(t, db.RemoveMember(ctx, "g", "v"))
	send("g", "u", "2", "apple two, after v left")
	_, err := db.AddMembers(ctx, "h", []string{"v"})
	must(t, err)
	send("h", "u", "2", "apple for v")
	if got := search(t, db, "v", "apple", ""); !slices.Equal(got, []int64{2, 1}) {
		t.Errorf("v's apples: %v (want h:2 then g:1)", got)
	}
	if got := search(t, db, "u", "apple", ""); len(got) != 4 {
		t.Errorf("u's apples: %v", got)
	}
	if got := search(t, db, "u", "apple", "g"); !slices.Equal(got, []int64{2, 1}) {
		t.Errorf("u's apples in g: %v", got)
	}
	sq, err := chat.ParseSearch("apple")
	must(t, err)
	sq.Conv, sq.BeforeSeq, sq.Limit = "g", 2, 20
	res, err := db.Search(ctx, "u", sq)
	must(t, err)
	if len(res.Results) != 1 || res.Results[0].Message.Seq != 1 || !res.Completed || res.Results[0].Snippet != "apple one" {
		t.Errorf("before_seq 2: %+v", res)
	}
	sq.Conv = ""
	res, err = db.Search(ctx, "u", sq)
	must(t, err)
	if len(res.Results) != 2 || res.Results[0].Conv != "h" || res.Results[0].Message.Seq != 1 || res.Results[1].Conv != "g" || res.Results[1].Message.Seq != 1 {
		t.Errorf("before_seq 2 in every conversation: %+v", res)
	}
	sq.Conv, sq.BeforeSeq, sq.Limit = "g", 0, 1
	res, err = db.Search(ctx, "u", sq)
	must(t, err)
	if len(res.Results) != 1 || res.Results[0].Message.Seq != 2 || res.Completed {
		t.Errorf("limit 1: %+v", res)
	}
	sq.Conv = "nope"
	_, err = db.Search(ctx, "u", sq)
	wantCode(t, "search in a missing conversation", err, chat.ENotFound)
	sq.Conv = "h"
	_, err = db.Search(ctx, "w", sq)
	wantCode(t, "search in another's conversation", err, chat.ENotMember)
	must(t, db.ClearHistory(ctx, "h", "v"))
	if got := search(t, db, "v", "apple", "h"); len(got) != 0 {
		t.Errorf("v's apples in h after clearing it: %v", got)
	}
}
