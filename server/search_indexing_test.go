package server_test

import (
	"database/sql"
	"encoding/json"
	"net/http"
	"testing"
	"time"
)

// TestSearchWhileIndexing: a database upgraded from before migration 0016
// (its messages not in the new index) is served at once; search answers
// from what the background job has indexed so far and says how far
// ("indexing"), and finds every older message once the job is done.
func TestSearchWhileIndexing(t *testing.T) {
	if testPG != nil {
		t.Skip("the background indexing of migrations 0007 and 0016 is SQLite's; PostgreSQL's backfill of older messages is postgres.TestMigrateTeamworkFromV3")
	}
	ts := newServer(t, func(c *testConfig) {
		// One batch of 3, then a long pause: the job stays in the middle.
		c.storage.SearchBackfillBatch = 3
		c.storage.SearchBackfillPause = time.Hour
	})
	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	g := alice.group(t, "team", bob)
	for i := range 10 {
		alice.send(t, g.ID, "z"+itoa(int64(i)), "zebra number "+itoa(int64(i)))
	}
	ts.stop()
	// As the binary before 0016 left it: that migration not applied.
	raw, err := sql.Open("sqlite", "file:"+ts.path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`DELETE FROM schema_migrations WHERE version = 16`} {
		if _, err := raw.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	raw.Close()

	ts.http.CloseIdleConnections()
	ts.start()
	ts.do(t, "GET", "/healthz", "", nil).want(t, http.StatusOK)
	type indexing struct {
		Done  int64 `json:"done"`
		Total int64 `json:"total"`
	}
	var res struct {
		searchJSON
		Indexing *indexing `json:"indexing"`
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		res.Indexing = nil
		bob.get(t, "/api/v1/search?"+q("zebra")).want(t, http.StatusOK).decode(t, &res)
		if res.Indexing == nil {
			t.Fatal("no indexing field while older messages wait to be indexed")
		}
		if res.Indexing.Done == 3 {
			break
		}
		if res.Indexing.Done != 0 || time.Now().After(deadline) {
			t.Fatalf("indexing %+v, want 0 then 3 of 10", *res.Indexing)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if res.Indexing.Total != 10 {
		t.Fatalf("indexing %+v, want a total of 10", *res.Indexing)
	}
	wantBodies(t, "while indexing", res.searchJSON, "zebra number 9", "zebra number 8", "zebra number 7")
	// Sent now: indexed at once, as always.
	alice.send(t, g.ID, "z10", "zebra number 10")
	wantBodies(t, "new while indexing", bob.search(t, q("zebra")+"&limit=2"), "zebra number 10", "zebra number 9")

	ts.cfg.storage.SearchBackfillPause = 0 // the default
	ts.restart()
	deadline = time.Now().Add(20 * time.Second)
	for {
		r := bob.get(t, "/api/v1/search?"+q("zebra")).want(t, http.StatusOK)
		var m map[string]json.RawMessage
		r.decode(t, &m)
		if _, ok := m["indexing"]; !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still indexing: %s", m["indexing"])
		}
		time.Sleep(10 * time.Millisecond)
	}
	want := []string{}
	for i := 10; i >= 0; i-- {
		want = append(want, "zebra number "+itoa(int64(i)))
	}
	wantBodies(t, "indexed", bob.search(t, q("zebra")), want...)
}
