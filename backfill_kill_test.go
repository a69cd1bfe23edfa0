package main

import (
	"database/sql"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/imserver/imserver/bench/populate"
)

// TestSearchBackfillSurvivesKill: the search index's background job
// (storage/search_backfill.go) killed with SIGKILL in the middle of
// indexing older messages resumes on restart from what it committed,
// finishes, and leaves every older message searchable exactly once, in a
// database and an index that pass their integrity checks.
func TestSearchBackfillSurvivesKill(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "kill.db")
	// A history of the real binary's making (texts and edits), then set
	// back to before migration 0016, as an upgrade finds it: the index
	// made again empty, every message waiting for the job.
	out, err := exec.Command(serverBin, "populate", "--db", db, "--messages", "30000", "--users", "20",
		"--groups", "5", "--directs", "10", "--all-hands", "1").CombinedOutput()
	if err != nil {
		t.Fatalf("populate: %v\n%s", err, out)
	}
	raw, err := sql.Open("sqlite", "file:"+db)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`DELETE FROM schema_migrations WHERE version = 16`} {
		if _, err := raw.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	raw.Close()
	cfg := writeConfig(t, dir, "limits:\n  send_rate: 1000000\n  send_burst: 1000000\nsqlite:\n  synchronous: FULL\n")

	p := startServer(t, db, cfg)
	token := login(t, p, "pop0")
	// Killed as soon as the job has committed a batch: most of its work
	// is still ahead of it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ix := searchIndexing(t, p, token)
		if ix == nil {
			t.Fatal("the job finished before the kill (make the history bigger)")
		}
		if ix.Done > 0 {
			t.Logf("killed at %d of %d documents indexed", ix.Done, ix.Total)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job indexed nothing in 30 s: %+v", *ix)
		}
		time.Sleep(2 * time.Millisecond)
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Wait()

	// The kill left the job in the middle.
	pending, total := backfillState(t, db)
	if pending == 0 || pending >= total {
		t.Fatalf("after the kill: pending %d of %d, want the job in the middle", pending, total)
	}

	p = startServer(t, db, cfg)
	token = login(t, p, "pop0")
	deadline = time.Now().Add(60 * time.Second)
	for ix := searchIndexing(t, p, token); ix != nil; ix = searchIndexing(t, p, token) {
		if time.Now().After(deadline) {
			t.Fatalf("still indexing after 60 s: %+v", *ix)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Searched for by its whole body, every sampled older message of a
	// conversation pop0 is in is found, and no message comes twice.
	raw, err = sql.Open("sqlite", "file:"+db+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	rows, err := raw.Query(`SELECT k.id, m.seq, m.body FROM messages m JOIN ids k ON k.key = m.conv
		JOIN members r ON r.conv_id = k.id AND r.user_id = (SELECT id FROM users WHERE username = 'pop0')
		WHERE m.id <= ? AND m.kind = 'text' AND length(m.body) >= 40 AND m.id % 97 = 0 LIMIT 40`, total)
	if err != nil {
		t.Fatal(err)
	}
	type older struct {
		conv string
		seq  int64
		body string
	}
	var sample []older
	for rows.Next() {
		var o older
		if err := rows.Scan(&o.conv, &o.seq, &o.body); err != nil {
			t.Fatal(err)
		}
		sample = append(sample, o)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(sample) < 10 {
		t.Fatalf("only %d older messages of pop0's conversations to look for", len(sample))
	}
	for _, o := range sample {
		var res searchAnswer
		q := url.Values{"q": {`"` + strings.Join(strings.Fields(strings.ReplaceAll(o.body, `"`, " ")), " ") + `"`}, "conv": {o.conv}, "limit": {"100"}}
		if code := p.do(t, "GET", "/api/v1/search?"+q.Encode(), token, nil, &res); code != 200 {
			t.Fatalf("search for %q: %d", o.body, code)
		}
		seen, found := map[int64]bool{}, false
		for _, h := range res.Results {
			if seen[h.Message.Seq] {
				t.Errorf("search for %q: seq %d twice", o.body, h.Message.Seq)
			}
			seen[h.Message.Seq] = true
			found = found || h.Message.Seq == o.seq
		}
		if !found && res.Completed {
			t.Errorf("%s seq %d (%q) not found: %d results", o.conv, o.seq, o.body, len(res.Results))
		}
	}
	raw.Close()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Wait()

	// The whole index: each document of a message with a body in it, no
	// other, each word of a document once; and sound.
	raw, err = sql.Open("sqlite", "file:"+db)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var check string
	if err := raw.QueryRow(`PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity_check: %q %v", check, err)
	}
	if _, err := raw.Exec(`INSERT INTO messages_fts (messages_fts) VALUES ('integrity-check')`); err != nil {
		t.Fatalf("FTS5 integrity-check: %v", err)
	}
	if _, err := raw.Exec(`CREATE VIRTUAL TABLE temp.inst USING fts5vocab(main, messages_fts, instance)`); err != nil {
		t.Fatal(err)
	}
	var entries, distinct, docs, bodies, strays int64
	for q, v := range map[string]*int64{
		`SELECT COUNT(*) FROM temp.inst`:                                                                                           &entries,
		`SELECT COUNT(*) FROM (SELECT DISTINCT term, doc FROM temp.inst)`:                                                          &distinct,
		`SELECT COUNT(DISTINCT doc) FROM temp.inst`:                                                                                &docs,
		`SELECT COUNT(*) FROM messages WHERE kind = 'text' AND body <> ''`:                                                         &bodies,
		`SELECT COUNT(*) FROM (SELECT DISTINCT doc FROM temp.inst) WHERE doc NOT IN (SELECT id FROM messages WHERE kind = 'text')`: &strays,
	} {
		if err := raw.QueryRow(q).Scan(v); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if entries != distinct {
		t.Errorf("%d index entries, %d distinct (word, document): some indexed twice", entries, distinct)
	}
	if docs != bodies || strays != 0 {
		t.Errorf("%d documents in the index, %d messages with a body (%d documents of no message)", docs, bodies, strays)
	}
	if bodies < total/2 {
		t.Errorf("%d messages with a body of %d documents", bodies, total)
	}
}

// searchAnswer is the part of a search answer the tests read.
type searchAnswer struct {
	Results []struct {
		Conv    string    `json:"conv"`
		Message storedMsg `json:"message"`
	} `json:"results"`
	Completed bool `json:"completed"`
	Indexing  *struct {
		Done  int64 `json:"done"`
		Total int64 `json:"total"`
	} `json:"indexing"`
}

// searchIndexing returns the indexing field of a search, nil once the
// index is complete.
func searchIndexing(t *testing.T, p *proc, token string) *struct{ Done, Total int64 } {
	t.Helper()
	var res searchAnswer
	if code := p.do(t, "GET", "/api/v1/search?q=anything", token, nil, &res); code != 200 {
		t.Fatalf("search: %d", code)
	}
	if res.Indexing == nil {
		return nil
	}
	return &struct{ Done, Total int64 }{res.Indexing.Done, res.Indexing.Total}
}

// login logs a populated user in.
func login(t *testing.T, p *proc, username string) string {
	t.Helper()
	var auth struct {
		Token string `json:"token"`
	}
	if code := p.do(t, "POST", "/api/v1/auth/login", "", map[string]string{"username": username, "password": populate.Password}, &auth); code != 200 {
		t.Fatalf("login %s: %d", username, code)
	}
	return auth.Token
}

// backfillState reads the job's progress from the file.
func backfillState(t *testing.T, db string) (pending, total int64) {
	t.Helper()
	raw, err := sql.Open("sqlite", "file:"+db)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if err := raw.QueryRow(`SELECT pending, total FROM search_backfill`).Scan(&pending, &total); err != nil {
		t.Fatal(err)
	}
	return pending, total
}
