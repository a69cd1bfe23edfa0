package storage

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/imserver/imserver/chat"
)

// oldSearchDatabase makes a database as the binary before migration 0007
// left it: schema 5, n text messages in group g1 (member u), each with a
// search document and its entries in the full-detail index of 0002.
// Message i's body is "old message wI and more", doc and seq i.
func oldSearchDatabase(t *testing.T, n int) string {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	old, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if err := migrateTo(ctx, old, 5, slog.Default()); err != nil {
		t.Fatal(err)
	}
	if v, err := schemaVersion(ctx, old); err != nil || v != 5 {
		t.Fatalf("schema %d %v, want 5", v, err)
	}
	stmts := []string{
		fmt.Sprintf(`INSERT INTO conversations (id, kind, name, members_count, max_seq, version, created_at) VALUES ('g1', 'group', 'g', 1, %d, 1, 0)`, n),
		`INSERT INTO members (conv_id, user_id, role, version, joined_at) VALUES ('g1', 'u', 'owner', 1, 0)`,
	}
	for i := 1; i <= n; i++ {
		body := fmt.Sprintf("old message w%d and more", i)
		stmts = append(stmts,
			fmt.Sprintf(`INSERT INTO messages (conv_id, seq, sender_id, client_msg_id, kind, body, ts, doc) VALUES ('g1', %d, 'u', 'c%d', 'text', '%s', %d, %d)`, i, i, body, i, i),
			fmt.Sprintf(`INSERT INTO search_docs (doc, conv_id, seq) VALUES (%d, 'g1', %d)`, i, i),
			fmt.Sprintf(`INSERT INTO messages_fts (rowid, body) VALUES (%d, '%s')`, i, body))
	}
	for _, q := range stmts {
		if _, err := old.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return path
}

// searchFor runs q for user u.
func searchFor(t *testing.T, db *DB, q string) chat.SearchResults {
	t.Helper()
	sq, err := chat.ParseSearch(q)
	if err != nil {
		t.Fatal(err)
	}
	sq.Limit = chat.MaxSearchLimit
	res, err := db.Search(context.Background(), "u", sq)
	if err != nil {
		t.Fatalf("search %q: %v", q, err)
	}
	return res
}

// seqsOf lists the results' seqs.
func seqsOf(res chat.SearchResults) []int64 {
	var out []int64
	for _, h := range res.Results {
		out = append(out, h.Message.Seq)
	}
	return out
}

// waitIndexed waits until search no longer reports indexing.
func waitIndexed(t *testing.T, db *DB) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for searchFor(t, db, "old").Indexing != nil {
		if time.Now().After(deadline) {
			t.Fatalf("still indexing: %+v", searchFor(t, db, "old").Indexing)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSearchBackfill: a database of the schema before 0007, opened by this
// binary, answers at once and searches what is indexed so far (saying
// so); a message edited or deleted before the job reached it is indexed
// with its new text or never; stopped in the middle, the job resumes
// where it was; every message is indexed once; a deleted body leaves no
// trace in the file.
func TestSearchBackfill(t *testing.T) {
	const n = 40
	ctx := context.Background()
	path := oldSearchDatabase(t, n)

	// A batch of 5, then an hour's pause: the job does one batch (docs
	// 40-36) while the test runs.
	start := time.Now()
	db, err := Open(ctx, path, Options{SearchBackfillBatch: 5, SearchBackfillPause: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Ping(ctx); err != nil {
		t.Fatalf("ping right after the upgrade: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("opening took %s", took)
	}
	deadline := time.Now().Add(10 * time.Second)
	var res chat.SearchResults
	for res = searchFor(t, db, "old message"); res.Indexing == nil || res.Indexing.Done < 5; res = searchFor(t, db, "old message") {
		if res.Indexing == nil {
			t.Fatal("search reports no indexing before the job has run")
		}
		if time.Now().After(deadline) {
			t.Fatalf("the first batch never ran: %+v", res.Indexing)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if *res.Indexing != (chat.SearchIndexing{Done: 5, Total: n}) {
		t.Fatalf("indexing %+v, want 5 of %d", *res.Indexing, n)
	}
	if got := fmt.Sprint(seqsOf(res)); got != "[40 39 38 37 36]" {
		t.Fatalf("results while indexing: %s, want the 5 newest", got)
	}
	// The phrase check of a body works on what the index found.
	if got := fmt.Sprint(seqsOf(searchFor(t, db, `"message w38 and"`))); got != "[38]" {
		t.Fatalf("phrase: %s", got)
	}

	// Before the job gets to them: an edit (seq 2), two deletes (seq 3,
	// not indexed; seq 39, indexed), and a new message.
	app := func(m chat.Message) {
		t.Helper()
		m.Conv, m.From = "g1", "u"
		if _, _, err := db.Append(ctx, m)(); err != nil {
			t.Fatalf("%+v: %v", m, err)
		}
	}
	app(chat.Message{ClientMsgID: "e2", Kind: chat.KindEdit, Target: 2, Body: "renamed zzedit text"})
	app(chat.Message{ClientMsgID: "d3", Kind: chat.KindDelete, Target: 3})
	app(chat.Message{ClientMsgID: "d39", Kind: chat.KindDelete, Target: 39})
	app(chat.Message{ClientMsgID: "new", Kind: chat.KindText, Body: "new old message zznew"})
	if got := fmt.Sprint(seqsOf(searchFor(t, db, "zznew"))); got != "[44]" {
		t.Fatalf("a new message is searchable at once: %s", got)
	}
	if got := fmt.Sprint(seqsOf(searchFor(t, db, "w39"))); got != "[]" {
		t.Fatalf("a deleted indexed message is found: %s", got)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// Stopped in the middle: the progress is in the file.
	raw, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	var pending, total int64
	if err := raw.QueryRow(`SELECT pending, total FROM search_backfill`).Scan(&pending, &total); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	if pending != n-5 || total != n {
		t.Fatalf("after a stop: pending %d total %d, want %d %d", pending, total, n-5, n)
	}

	db, err = Open(ctx, path, Options{SearchBackfillBatch: 5})
	if err != nil {
		t.Fatal(err)
	}
	waitIndexed(t, db)
	for i := 1; i <= n; i++ {
		got := fmt.Sprint(seqsOf(searchFor(t, db, fmt.Sprintf("w%d", i))))
		want := fmt.Sprintf("[%d]", i)
		if i == 2 || i == 3 || i == 39 {
			want = "[]"
		}
		if got != want {
			t.Fatalf("w%d: %s, want %s", i, got, want)
		}
	}
	if got := fmt.Sprint(seqsOf(searchFor(t, db, "zzedit"))); got != "[2]" {
		t.Fatalf("a message edited before it was indexed: %s", got)
	}
	res = searchFor(t, db, "old message")
	if len(res.Results) != n-2 || res.Results[0].Message.Seq != 44 || res.Indexing != nil {
		t.Fatalf("every message: %v (indexing %+v)", seqsOf(res), res.Indexing)
	}
	// Indexed once: a delete now takes it out for good.
	if _, _, err := db.Append(ctx, chat.Message{Conv: "g1", From: "u", ClientMsgID: "d2", Kind: chat.KindDelete, Target: 2})(); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(seqsOf(searchFor(t, db, "zzedit"))); got != "[]" {
		t.Fatalf("deleted after the job indexed it: %s", got)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// Each document once: the index counts its documents per word. And
	// the index is sound.
	raw, err = sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Exec(`INSERT INTO messages_fts (messages_fts) VALUES ('integrity-check')`); err != nil {
		t.Fatalf("integrity-check: %v", err)
	}
	if _, err := raw.Exec(`CREATE VIRTUAL TABLE temp.vocab USING fts5vocab(main, messages_fts, row)`); err != nil {
		t.Fatal(err)
	}
	for term, want := range map[string]int{"message": n - 2, "zzedit": 0, "w2": 0, "w3": 0, "w39": 0} {
		var docs int
		err := raw.QueryRow(`SELECT doc FROM temp.vocab WHERE term = ?`, term).Scan(&docs)
		if err == sql.ErrNoRows {
			err = nil
		}
		if err != nil {
			t.Fatal(err)
		}
		if docs != want {
			t.Errorf("%q is in %d documents of the index, want %d", term, docs, want)
		}
	}
	raw.Close()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{"w3 and", "w39 and"} {
		if bytes.Contains(data, []byte(gone)) {
			t.Fatalf("the database file still holds %q", gone)
		}
	}
}

// TestSearchBackfillEmpty: a database with nothing to index starts with
// the index complete.
func TestSearchBackfillEmpty(t *testing.T) {
	db, _ := openTest(t, Options{})
	if err := db.CreateGroup(context.Background(), "g1", "g", "u", nil); err != nil {
		t.Fatal(err)
	}
	if !db.w.indexed.Load() {
		t.Fatal("a new database waits for background indexing")
	}
	if res := searchFor(t, db, "anything"); res.Indexing != nil {
		t.Fatalf("indexing %+v", res.Indexing)
	}
}

// TestPhraseMatch: phrases and words cut like the index's tokenizer.
func TestPhraseMatch(t *testing.T) {
	for _, c := range []struct {
		body, q string
		want    bool
	}{
		{"the quick brown fox", `"quick brown"`, true},
		{"the quick brown fox", `"brown quick"`, false},
		{"the quick, brown fox", `"quick brown"`, true},
		{"the quick brown fox", `"quick bro"*`, true},
		{"the quick brown fox", `"quick fox"`, false},
		{"send an e-mail now", `e-mail`, true},
		{"send an E mail now", `e-mail`, true},
		{"mail e", `e-mail`, false},
		{"Crème Brûlée tonight", `"creme brulee"`, true},
		{"CAFE\u0301 au lait", `"café au"`, true},
		{"İstanbul ÆON", `"istanbul æon"`, true},
		{"a b c", `"a b" "b c"`, true},
		{"a b c", `"a b" "c b"`, false},
		{"one two", `one`, true},
	} {
		sq, err := chat.ParseSearch(c.q)
		if err != nil {
			t.Fatal(err)
		}
		if got := phraseMatch(c.body, searchTerms(sq.Parts)); got != c.want {
			t.Errorf("%q in %q: %v, want %v (words %q)", c.q, c.body, got, c.want, strings.Join(chat.SearchWords(c.body), "|"))
		}
	}
	if got := strings.Join(chat.SearchWords("Déjà-vu, x_y 3.5 ǅemal"), "|"); got != "deja|vu|x|y|3|5|ǆemal" {
		t.Errorf("words %q", got)
	}
}

// TestSearchPhraseAgainstIndex: the index runs what ftsMatch makes of a
// query of phrases (no phrase reaches it), and the results are those
// phrase queries want.
func TestSearchPhraseAgainstIndex(t *testing.T) {
	db, _ := openTest(t, Options{})
	ctx := context.Background()
	if err := db.CreateGroup(ctx, "g1", "g", "u", nil); err != nil {
		t.Fatal(err)
	}
	for i, body := range []string{"the quick brown fox", "brown quick", "e-mail me", "mail e", "Crème Brûlée", "x_y 1.5"} {
		if _, _, err := db.Append(ctx, chat.Message{Conv: "g1", From: "u", ClientMsgID: fmt.Sprint(i), Kind: chat.KindText, Body: body})(); err != nil {
			t.Fatal(err)
		}
	}
	for q, want := range map[string]string{
		`"quick brown"`:     "[1]",
		`quick brown`:       "[2 1]",
		`"quick bro"*`:      "[1]",
		`e-mail`:            "[3]",
		`"creme brulee"`:    "[5]",
		`"brûlée"`:          "[5]",
		`x_y`:               "[6]",
		`1.5`:               "[6]",
		`"the quick" "fox"`: "[1]",
	} {
		if got := fmt.Sprint(seqsOf(searchFor(t, db, q))); got != want {
			t.Errorf("%s: %s, want %s", q, got, want)
		}
	}
}
