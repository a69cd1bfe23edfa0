package server_test

import (
	"bytes"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

type searchJSON struct {
	Results []struct {
		Conv    string      `json:"conv"`
		Message teamMessage `json:"message"`
		Snippet string      `json:"snippet"`
	} `json:"results"`
	Completed bool   `json:"completed"`
	Next      string `json:"next"`
}

func (a *account) search(t testing.TB, params string) searchJSON {
	t.Helper()
	var s searchJSON
	a.get(t, "/api/v1/search?"+params).want(t, http.StatusOK).decode(t, &s)
	return s
}

// bodies lists the results' bodies, newest first as returned.
func (s searchJSON) bodies() []string {
	out := []string{}
	for _, r := range s.Results {
		out = append(out, r.Message.Body)
	}
	return out
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func q(s string) string { return "q=" + url.QueryEscape(s) }

func wantBodies(t *testing.T, what string, got searchJSON, want ...string) {
	t.Helper()
	if g := got.bodies(); strings.Join(g, "|") != strings.Join(want, "|") {
		t.Fatalf("%s: got %q, want %q", what, g, want)
	}
}

// TestSearch: words, phrases and prefixes, ignoring case and accents;
// current bodies only (edits re-indexed, deletes gone, mutations never
// results); only within each caller's visible range.
func TestSearch(t *testing.T) {
	ts := newServer(t)
	alice, bob, carol := ts.register(t, "alice"), ts.register(t, "bob"), ts.register(t, "carol")
	g := alice.group(t, "team", bob)
	d := alice.direct(t, carol)
	alice.send(t, g.ID, "1", "Crème brûlée for dessert")
	alice.send(t, g.ID, "2", "the quick brown fox")
	pie := alice.send(t, g.ID, "3", "apple pie tonight")
	alice.send(t, d.ID, "4", "creme brulee is better")
	wantBodies(t, "accents", alice.search(t, q("CREME brulee")), "creme brulee is better", "Crème brûlée for dessert")
	wantBodies(t, "bob sees his conversations only", bob.search(t, q("creme")), "Crème brûlée for dessert")
	wantBodies(t, "phrase", alice.search(t, q(`"brown fox"`)), "the quick brown fox")
	wantBodies(t, "phrase out of order", alice.search(t, q(`"fox brown"`)))
	wantBodies(t, "words any order", alice.search(t, q("fox quick")), "the quick brown fox")
	wantBodies(t, "prefix", alice.search(t, q("bro*")), "the quick brown fox")
	wantBodies(t, "whole words", alice.search(t, q("bro")))
	wantBodies(t, "conv", alice.search(t, q("creme")+"&conv="+d.ID), "creme brulee is better")

	e := alice.edit(t, g.ID, pie.Seq, "banana split tonight")
	bob.react(t, g.ID, pie.Seq, "🍌", true)
	wantBodies(t, "old text after the edit", alice.search(t, q("apple")))
	res := alice.search(t, q("banana"))
	wantBodies(t, "edited text, once", res, "banana split tonight")
	if m := res.Results[0].Message; m.Seq != pie.Seq || m.Kind != "text" || m.EditedAt != e.TS || len(m.Reactions) != 1 || res.Results[0].Conv != g.ID || res.Results[0].Snippet == "" {
		t.Fatalf("result %+v", res.Results[0])
	}
	alice.remove(t, g.ID, pie.Seq)
	wantBodies(t, "after the delete", alice.search(t, q("banana")))

	// Visible ranges: carol joins late, bob leaves, alice clears.
	before := alice.send(t, g.ID, "5", "zebra one")
	alice.post(t, convPath(g.ID, "members"), map[string]any{"user_ids": []string{carol.ID()}}).want(t, http.StatusOK)
	alice.send(t, g.ID, "6", "zebra two")
	wantBodies(t, "joined late", carol.search(t, q("zebra")), "zebra two")
	bob.post(t, convPath(g.ID, "leave"), nil).want(t, http.StatusNoContent)
	alice.send(t, g.ID, "7", "zebra three")
	wantBodies(t, "after leaving", bob.search(t, q("zebra")), "zebra two", "zebra one")
	wantBodies(t, "member", alice.search(t, q("zebra")), "zebra three", "zebra two", "zebra one")
	wantBodies(t, "paging", alice.search(t, q("zebra")+"&limit=2"), "zebra three", "zebra two")
	if alice.search(t, q("zebra")+"&limit=2").Completed || !alice.search(t, q("zebra")+"&limit=3").Completed {
		t.Fatal("completed is wrong")
	}
	wantBodies(t, "before_seq", alice.search(t, q("zebra")+"&conv="+g.ID+"&before_seq="+itoa(before.Seq+2)), "zebra two", "zebra one")
	// Without conv, before_seq applies to each conversation's seqs.
	zd := alice.send(t, d.ID, "8", "zebra direct")
	wantBodies(t, "before_seq without conv, below all", alice.search(t, q("zebra")+"&before_seq="+itoa(zd.Seq)))
	wantBodies(t, "before_seq without conv", alice.search(t, q("zebra")+"&before_seq="+itoa(zd.Seq+1)), "zebra direct")
	alice.post(t, convPath(g.ID, "clear"), nil).want(t, http.StatusNoContent)
	wantBodies(t, "after clearing", alice.search(t, q("zebra")), "zebra direct")
}

// TestSearchBadInput: queries that cannot be parsed and conversations the
// caller cannot search are refused with the contract's errors, never 500.
func TestSearchBadInput(t *testing.T) {
	ts := newServer(t)
	alice, bob, carol := ts.register(t, "alice"), ts.register(t, "bob"), ts.register(t, "carol")
	d := alice.direct(t, bob)
	alice.send(t, d.ID, "1", "near the (old) mill")
	for _, c := range []struct {
		params string
		status int
		code   string
	}{
		{q(`"`), 400, "bad_request"},
		{q(`mill "old`), 400, "bad_request"},
		{q(`*`), 400, "bad_request"},
		{q(`NEAR(`), 400, "bad_request"},
		{q(`NEAR(old mill)`), 400, "bad_request"},
		{q(`old*mill`), 400, "bad_request"},
		{q(`body:mill`), 400, "bad_request"},
		{q(strings.Repeat("word ", 2048)), 400, "bad_request"},
		{q(""), 400, "bad_request"},
		{q("!!! ..."), 400, "bad_request"},
		{q("mill") + "&limit=0", 400, "bad_request"},
		{q("mill") + "&before_seq=-1", 400, "bad_request"},
		{q("mill") + "&conv=" + d.ID + "&before_seq=x", 400, "bad_request"},
	} {
		alice.get(t, "/api/v1/search?"+c.params).wantError(t, c.status, c.code)
	}
	carol.get(t, "/api/v1/search?"+q("mill")+"&conv="+d.ID).wantError(t, http.StatusForbidden, "not_member")
	alice.get(t, "/api/v1/search?"+q("mill")+"&conv=nonexistent").wantError(t, http.StatusNotFound, "not_found")
	// An id no conversation can have (not UTF-8, a NUL) is just as unknown.
	alice.get(t, "/api/v1/search?"+q("mill")+"&conv=%FF").wantError(t, http.StatusNotFound, "not_found")
	alice.get(t, "/api/v1/search?"+q("mill")+"&conv=%00").wantError(t, http.StatusNotFound, "not_found")
	// What looks like syntax inside a phrase, or operators as words, is
	// just text.
	wantBodies(t, "quoted", alice.search(t, q(`"(old) mill"`)), "near the (old) mill")
	wantBodies(t, "operator words", alice.search(t, q(`near AND mill`)))
	wantBodies(t, "NEAR as a word", alice.search(t, q(`NEAR mill`)), "near the (old) mill")
}

// TestSearchResultsCarryAttachments: a search result is the message as a
// pull returns it, attachments included, with links that open without the
// header.
func TestSearchResultsCarryAttachments(t *testing.T) {
	ts := newServer(t)
	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	g := alice.group(t, "g", bob)
	img := pngImage(t, 40, 30)
	f := alice.uploadFile(t, "chart.png", "image/png", img)
	alice.sendFiles(t, g.ID, "with-file", "quarterly chart", f.ID).want(t, http.StatusCreated)
	alice.send(t, g.ID, "without", "quarterly numbers")

	var got struct {
		Results []struct {
			Message fileMessageJSON `json:"message"`
		} `json:"results"`
	}
	bob.get(t, "/api/v1/search?"+q("quarterly")).want(t, http.StatusOK).decode(t, &got)
	if len(got.Results) != 2 {
		t.Fatalf("got %d results, want 2", len(got.Results))
	}
	if a := got.Results[0].Message.Attachments; len(a) != 0 {
		t.Errorf("the message without files: got attachments %+v", a)
	}
	a := got.Results[1].Message.Attachments
	if len(a) != 1 || a[0].ID != f.ID || a[0].Name != "chart.png" || a[0].Width != 40 || a[0].Height != 30 || a[0].URL == "" {
		t.Fatalf("the message with a file: got attachments %+v, want chart.png (%s) with its link", a, f.ID)
	}
	if r := ts.fetch(t, a[0].URL, ""); r.Status != http.StatusOK || !bytes.Equal(r.Body, img) {
		t.Errorf("the result's link: status %d, %d bytes", r.Status, len(r.Body))
	}
}

// TestSearchPagesAcrossConversations: a search of every conversation pages
// on with the cursor its answer gives (next), to the last hit, each once,
// in the order of one big page; a cursor no search gave is bad_request.
func TestSearchPagesAcrossConversations(t *testing.T) {
	ts := newServer(t)
	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	g1, g2 := alice.group(t, "one", bob), alice.group(t, "two", bob)
	for i := range 7 {
		conv := g1.ID
		if i%3 == 1 {
			conv = g2.ID
		}
		alice.send(t, conv, "m"+strconv.Itoa(i), "budget item "+strconv.Itoa(i))
	}
	alice.send(t, g2.ID, "other", "nothing to find")

	all := bob.search(t, q("budget")+"&limit=100")
	if len(all.Results) != 7 || !all.Completed || all.Next != "" {
		t.Fatalf("one page: got %d results, completed %v, next %q; want 7, true, none", len(all.Results), all.Completed, all.Next)
	}
	var paged []string
	cursor := ""
	for page := 0; ; page++ {
		if page > 7 {
			t.Fatalf("still not completed after %d pages", page)
		}
		params := q("budget") + "&limit=2"
		if cursor != "" {
			params += "&cursor=" + url.QueryEscape(cursor)
		}
		p := bob.search(t, params)
		paged = append(paged, p.bodies()...)
		if p.Completed {
			if p.Next != "" {
				t.Errorf("the last page has next %q", p.Next)
			}
			break
		}
		if len(p.Results) != 2 || p.Next == "" {
			t.Fatalf("page %d: %d results, next %q; want 2 and a cursor", page, len(p.Results), p.Next)
		}
		cursor = p.Next
	}
	if got, want := strings.Join(paged, "|"), strings.Join(all.bodies(), "|"); got != want {
		t.Errorf("paged: got %s, want %s", got, want)
	}

	// Within one conversation, as before_seq does.
	p := bob.search(t, q("budget")+"&limit=2&conv="+g1.ID)
	p = bob.search(t, q("budget")+"&limit=10&conv="+g1.ID+"&cursor="+url.QueryEscape(p.Next))
	if len(p.Results) != 3 || !p.Completed {
		t.Errorf("second page in one conversation: got %q, want the 3 older of its 5", p.bodies())
	}

	for _, bad := range []string{"x", "d", "t1.2", "d-5", strings.Repeat("9", 300)} {
		bob.get(t, "/api/v1/search?"+q("budget")+"&cursor="+url.QueryEscape(bad)).wantError(t, http.StatusBadRequest, "bad_request")
	}
}
