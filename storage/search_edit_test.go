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

	"github.com/imserver/imserver/chat"
)

// TestFTSDiff: the words an edit takes out and brings, as unicode61 cuts
// ASCII (runs of letters and digits, lower-cased), and no diff beyond ASCII.
func TestFTSDiff(t *testing.T) {
	for _, c := range []struct {
		old, text, gone, added string
		ok                     bool
	}{
		{"bench:123:xxxx", "bench:456:xxxx", "123", "456", true},
		{"Fix the tpyo, please", "fix the typo please", "tpyo", "typo", true},
		{"a a-b", "a-b c", "", "c", true}, // "a" stays: a-b still holds it
		{"same words", "SAME, words!", "", "", true},
		{"one_two", "one", "two", "", true}, // '_' separates
		{"gone entirely", "", "gone entirely", "", true},
		{"café", "cafe", "", "", false},
		{"plain", "naïve", "", "", false},
	} {
		gone, added, ok := ftsDiff(c.old, c.text)
		if gone != c.gone || added != c.added || ok != c.ok {
			t.Errorf("ftsDiff(%q, %q) = %q, %q, %v; want %q, %q, %v", c.old, c.text, gone, added, ok, c.gone, c.added, c.ok)
		}
	}
}

// TestEditIndexesOnlyTheChange: after edits that keep some words, drop
// others, change case, and cross into and out of non-ASCII text, the index
// holds exactly the words of each message's current body (read back with
// fts5vocab, one (word, doc) pair per entry), searches find the current
// text and not the old, and the index passes its integrity-check.
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
	edit(a.Seq, "BETA delta Alpha")   // gamma out, delta in, alpha kept
	edit(b.Seq, "beta only, really")  // really in
	edit(a.Seq, "café delta")         // non-ASCII: the full texts
	edit(a.Seq, "delta epsilon-beta") // and back
	edit(b.Seq, "only")               // beta out, the rest kept
	send(chat.Message{Kind: chat.KindDelete, Target: c.Seq})
	bodies := map[int64]string{a.Seq: "delta epsilon-beta", b.Seq: "only"}

	for q, want := range map[string]string{
		"gamma": "[]", "alpha": "[]", "cafe": "[]", "really": "[]", "short": "[]", "lived": "[]",
		"delta": fmt.Sprint([]int64{a.Seq}), "epsilon": fmt.Sprint([]int64{a.Seq}), "beta": fmt.Sprint([]int64{a.Seq}),
		"only": fmt.Sprint([]int64{b.Seq}),
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
	rows, err := raw.Query(`SELECT i.term, d.seq FROM temp.inst i JOIN search_docs d ON d.doc = i.doc`)
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
