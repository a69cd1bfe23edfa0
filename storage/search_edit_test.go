package storage

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/imserver/imserver/chat"
)

// TestASCIIWords: words as unicode61 cuts ASCII (runs of letters and
// digits, lower-cased); no words beyond ASCII.
func TestASCIIWords(t *testing.T) {
	for in, want := range map[string]string{
		"bench:123:xxxx":        "bench 123 xxxx",
		"Fix the tpyo, please!": "fix the tpyo please",
		"one_two a-b":           "one two a b",
		"":                      "",
		"café":                  "-",
		"naïve plain":           "-",
	} {
		words, ok := asciiWords(in)
		got := strings.Join(words, " ")
		if !ok {
			got = "-"
		}
		if got != want {
			t.Errorf("asciiWords(%q) = %q, want %q", in, got, want)
		}
	}
	if got := missing([]string{"a", "b", "a", "c"}, []string{"c"}); got != "a b" {
		t.Errorf("missing: %q", got)
	}
}

// TestEditIndexesOnlyTheChange: after edits that keep some words, drop
// others, change case, and cross into and out of non-ASCII text, the
// index holds, once each, the words of each message's current body and
// the stale ones its ASCII edits took out (read back with fts5vocab, one
// (word, doc) pair per entry); searches find the current text and never
// the old; a delete erases both; and the index passes its
// integrity-check.
func TestEditIndexesOnlyTheChange(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "edit.db")
	db, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.CreateGroup(ctx, "g1", "g", "u", nil); err != nil {
		t.Fatal(err)
	}
	send := func(m chat.Message) chat.Message {
		t.Helper()
		m.Conv, m.From = "g1", "u"
		m.ClientMsgID = fmt.Sprintf("c%d-%s", m.Target, m.Body)
		if m.Kind == "" {
			m.Kind = chat.KindText
		}
		got, _, err := db.Append(ctx, m)()
		if err != nil {
			t.Fatalf("%+v: %v", m, err)
		}
		return got
	}
	a := send(chat.Message{Body: "alpha beta gamma gamma"})
	b := send(chat.Message{Body: "beta only"})
	c := send(chat.Message{Body: "short lived words"})
	edit := func(seq int64, body string) { send(chat.Message{Kind: chat.KindEdit, Target: seq, Body: body}) }
	d := send(chat.Message{Body: "doomed words here"})
	edit(a.Seq, "BETA delta Alpha")   // gamma stale, delta in, alpha kept
	edit(b.Seq, "beta only, really")  // really in
	edit(d.Seq, "doomed again")       // words, here stale
	edit(a.Seq, "café delta")         // non-ASCII: replaced whole
	edit(a.Seq, "delta epsilon-beta") // and back: replaced whole
	edit(a.Seq, "delta zeta")         // epsilon, beta stale
	edit(b.Seq, "only")               // beta, really stale
	send(chat.Message{Kind: chat.KindDelete, Target: c.Seq})
	send(chat.Message{Kind: chat.KindDelete, Target: d.Seq}) // its stale words go too
	// What the index holds for each message: its body's words and its
	// stale ones.
	bodies := map[int64]string{a.Seq: "delta zeta epsilon beta", b.Seq: "only beta really"}

	for q, want := range map[string]string{
		"gamma": "[]", "alpha": "[]", "cafe": "[]", "really": "[]", "short": "[]", "lived": "[]",
		"epsilon": "[]", "beta": "[]", "doomed": "[]", "words": "[]", "zeta delta": fmt.Sprint([]int64{a.Seq}),
		"delta": fmt.Sprint([]int64{a.Seq}), `"delta zeta"`: fmt.Sprint([]int64{a.Seq}), "zet*": fmt.Sprint([]int64{a.Seq}),
		`"zeta delta"`: "[]", "only": fmt.Sprint([]int64{b.Seq}),
	} {
		if got := fmt.Sprint(seqsOf(searchFor(t, db, q))); got != want {
			t.Errorf("search %q: %s, want %s", q, got, want)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	raw, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Exec(`INSERT INTO messages_fts (messages_fts) VALUES ('integrity-check')`); err != nil {
		t.Fatalf("integrity-check: %v", err)
	}
	if _, err := raw.Exec(`CREATE VIRTUAL TABLE temp.inst USING fts5vocab(main, messages_fts, instance)`); err != nil {
		t.Fatal(err)
	}
	rows, err := raw.Query(`SELECT i.term, m.seq FROM temp.inst i JOIN messages m ON m.id = i.doc`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var term string
		var seq int64
		if err := rows.Scan(&term, &seq); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%d:%s", seq, term))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var want []string
	for seq, body := range bodies {
		words, _ := asciiWords(body)
		slices.Sort(words)
		for _, w := range slices.Compact(words) {
			want = append(want, fmt.Sprintf("%d:%s", seq, w))
		}
	}
	sort.Strings(got)
	sort.Strings(want)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("index entries\n got %v\nwant %v", got, want)
	}
}

// TestMigration0008: a database of schema 7 with messages in it gets
// messages.stale; its messages, never edited, are then edited, searched
// and deleted like new ones.
func TestMigration0008(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v7.db")
	// One group g0 of u0; seqs 2 and 4 ("message 1", "message 3") are u0's.
	if _, err := MakeSchemaForTest(path, 7, 1, 1, 4); err != nil {
		t.Fatal(err)
	}
	db, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.readers.QueryRow(`SELECT COUNT(*) FROM pragma_table_info('messages') WHERE name = 'stale'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("messages.stale: %d columns (%v)", n, err)
	}
	search := func(q string) string {
		t.Helper()
		sq, err := chat.ParseSearch(q)
		if err != nil {
			t.Fatal(err)
		}
		sq.Limit = chat.MaxSearchLimit
		for deadline := time.Now().Add(20 * time.Second); ; {
			res, err := db.Search(ctx, "u0", sq)
			if err != nil {
				t.Fatalf("search %q: %v", q, err)
			}
			if res.Indexing == nil {
				return fmt.Sprint(seqsOf(res))
			}
			if time.Now().After(deadline) {
				t.Fatal("older messages still being indexed")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	app := func(m chat.Message) {
		t.Helper()
		m.Conv, m.From = "g0", "u0"
		if _, _, err := db.Append(ctx, m)(); err != nil {
			t.Fatalf("%+v: %v", m, err)
		}
	}
	// The older messages are indexed in the background: the edit below
	// then finds its old words in the index.
	if got := search("message"); got != "[4 3 2 1]" {
		t.Fatalf("before the edits: %s", got)
	}
	app(chat.Message{ClientMsgID: "e1", Kind: chat.KindEdit, Target: 2, Body: "first new words"})
	app(chat.Message{ClientMsgID: "d2", Kind: chat.KindDelete, Target: 4})
	for q, want := range map[string]string{"message": "[3 1]", "new": "[2]", "words": "[2]", "3": "[]", "1": "[]"} {
		if got := search(q); got != want {
			t.Errorf("search %q: %s, want %s", q, got, want)
		}
	}
	var stale string
	if err := db.readers.QueryRow(`SELECT stale FROM messages WHERE seq = 2`).Scan(&stale); err != nil || stale != "message 1" {
		t.Fatalf("stale %q %v, want the words the edit took out", stale, err)
	}
}
