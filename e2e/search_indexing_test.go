package e2e

import (
	"database/sql"
	"testing"

	_ "modernc.org/sqlite"
)

// TestSearchIndexingShown: after an upgrade whose older messages are not
// all in the search index yet, the search results say "Indexing older
// messages… N%" (from the answer's indexing {done, total}), and once the
// server has indexed them the open results refresh by themselves: the line
// goes and the older messages are found.
func TestSearchIndexingShown(t *testing.T) {
	srv := startServer(t, "")
	alice := newUser(t, srv, "alice", "Alice Archer")
	var grp struct {
		Conversation struct {
			ID string `json:"id"`
		} `json:"conversation"`
	}
	srv.call(t, alice.token(), "POST", "/groups", map[string]any{"name": "Notes", "member_ids": []string{}}, &grp)
	srv.sendAPI(t, alice.token(), grp.Conversation.ID, "zebra", 10)
	alice.openConv("Notes")
	alice.waitMessage("zebra 10")

	// As the binary before migration 0016 left the database: on the next
	// start the ten messages wait for the background job, which indexes
	// two (the newest) and then pauses for an hour.
	srv.restart(t, "sqlite: {synchronous: NORMAL, search_index_batch: 2, search_index_pause: 1h}\n", func() {
		raw, err := sql.Open("sqlite", "file:"+srv.dbPath())
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		for _, q := range []string{`DELETE FROM schema_migrations WHERE version = 16`} {
			if _, err := raw.Exec(q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	})
	alice.waitOnline()
	alice.typeInto("#search-input", "zebra")
	alice.pressEnter(false)
	alice.waitFor("the indexing line", `(e => e && !e.hidden && e.textContent === 'Indexing older messages… 20%')(document.querySelector('#search-indexing'))`)
	if n := alice.evalInt(`document.querySelectorAll('#search-results .search-result').length`); n != 2 {
		alice.fail("%d results while two of ten messages are indexed", n)
	}
	if got := alice.evalString(`getComputedStyle(document.querySelector('#search-indexing')).display`); got == "none" {
		alice.fail("the indexing line is not displayed")
	}
	alice.saveScreenshot("search-indexing.png")

	// The rest indexed (the default pace): the panel, still open, searches
	// again by itself.
	srv.restart(t, "", nil)
	alice.waitFor("the line gone and all ten found", `document.querySelector('#search-indexing').hidden && document.querySelectorAll('#search-results .search-result').length === 10`)
	if got := alice.evalString(`document.querySelector('#search-status').textContent`); got != "10 results for “zebra”" {
		alice.fail("status %q", got)
	}
}
