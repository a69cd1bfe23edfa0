package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
)

// sendFast stores n messages from a over one pipelined WebSocket session.
func sendFast(t *testing.T, a *account, conv string, n int) []messageJSON {
	t.Helper()
	c := a.dial(t, a.ts.unique("sender"))
	out := make([]messageJSON, 0, n)
	for len(out) < n {
		k := min(n-len(out), 200)
		out = append(out, c.pipeline(t, conv, k, "bulk")...)
	}
	c.conn.CloseNow()
	return out
}

func TestPagingForward(t *testing.T) {
	ts := newServer(t)
	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	g := alice.group(t, "team", bob)
	sendFast(t, alice, g.ID, 25)
	ws := bob.dial(t, "bob")

	for _, tc := range []struct {
		query     string
		lo, hi    int64 // expected seqs lo..hi; hi < lo for none
		completed bool
	}{
		{"", 1, 25, true},
		{"after_seq=0&limit=10", 1, 10, false},
		{"after_seq=10&limit=10", 11, 20, false},
		{"after_seq=15&limit=10", 16, 25, true},
		{"after_seq=20&limit=10", 21, 25, true},
		{"after_seq=24&limit=1", 25, 25, true},
		{"after_seq=23&limit=1", 24, 24, false},
		{"after_seq=25", 1, 0, true},
		{"after_seq=1000", 1, 0, true},
		{"limit=1000", 1, 25, true},
		{"limit=5000", 1, 25, true},
	} {
		want := seqRange(tc.lo, tc.hi)
		p := bob.page(t, g.ID, tc.query)
		if got := seqsOf(p.Messages); !equalSeqs(got, want) || p.Completed != tc.completed || p.MaxSeq != 25 {
			t.Errorf("GET ?%s: got %v completed %v max_seq %d, want %v completed %v max_seq 25",
				tc.query, got, p.Completed, p.MaxSeq, want, tc.completed)
		}
		for _, m := range p.Messages {
			if m.Conv != g.ID || m.From != alice.ID() || m.Kind != "text" || m.Body == "" || m.TS == 0 {
				t.Errorf("GET ?%s: incomplete message %+v", tc.query, m)
				break
			}
		}
		// The sync frame answers the same page.
		var after, limit int64
		fmt.Sscanf(tc.query, "after_seq=%d&limit=%d", &after, &limit)
		if tc.query == "limit=1000" || tc.query == "limit=5000" {
			fmt.Sscanf(tc.query, "limit=%d", &limit)
		}
		req := map[string]any{"type": "sync", "conv": g.ID, "after_seq": after}
		if limit > 0 {
			req["limit"] = limit
		}
		f := ws.call(t, req)
		if f.Type != "messages" || f.Conv != g.ID {
			t.Errorf("sync %v: got %s", req, f)
			continue
		}
		if got := seqsOf(f.Messages); !equalSeqs(got, want) || f.Completed != tc.completed || f.MaxSeq != 25 {
			t.Errorf("sync %v: got %v completed %v max_seq %d, want %v completed %v max_seq 25",
				req, got, f.Completed, f.MaxSeq, want, tc.completed)
		}
		for i := range f.Messages {
			if f.Messages[i] != p.Messages[i] {
				t.Errorf("sync %v: message %+v, GET gave %+v", req, f.Messages[i], p.Messages[i])
				break
			}
		}
	}
}

func TestPagingBackward(t *testing.T) {
	ts := newServer(t)
	alice := ts.register(t, "alice")
	g := alice.group(t, "team")
	sendFast(t, alice, g.ID, 25)

	for _, tc := range []struct {
		query     string
		lo, hi    int64
		completed bool
	}{
		{"before_seq=26&limit=10", 16, 25, false},
		{"before_seq=1000000&limit=10", 16, 25, false},
		{"before_seq=16&limit=10", 6, 15, false},
		{"before_seq=11&limit=10", 1, 10, true},
		{"before_seq=6&limit=10", 1, 5, true},
		{"before_seq=2&limit=1", 1, 1, true},
		{"before_seq=3&limit=1", 2, 2, false},
		{"before_seq=1", 1, 0, true},
		{"before_seq=0", 1, 0, true},
		{"before_seq=26", 1, 25, true},
		{"before_seq=26&limit=5000", 1, 25, true},
	} {
		want := seqRange(tc.lo, tc.hi)
		p := alice.page(t, g.ID, tc.query)
		if got := seqsOf(p.Messages); !equalSeqs(got, want) || p.Completed != tc.completed || p.MaxSeq != 25 {
			t.Errorf("GET ?%s: got %v completed %v max_seq %d, want %v completed %v max_seq 25",
				tc.query, got, p.Completed, p.MaxSeq, want, tc.completed)
		}
	}

	// Paging back from the end with the first seq of each page reaches
	// the start without gaps or repeats.
	var all []int64
	before := int64(1 << 40)
	for {
		p := alice.page(t, g.ID, fmt.Sprintf("before_seq=%d&limit=7", before))
		all = append(seqsOf(p.Messages), all...)
		if p.Completed {
			break
		}
		before = p.Messages[0].Seq
	}
	if want := seqRange(1, 25); !equalSeqs(all, want) {
		t.Errorf("paging backwards: got %v, want %v", all, want)
	}
}

func TestPagingBadParameters(t *testing.T) {
	ts := newServer(t)
	alice := ts.register(t, "alice")
	g := alice.group(t, "team")
	alice.send(t, g.ID, "1", "x")
	for _, q := range []string{
		"limit=0", "limit=-1", "limit=abc", "limit=1.5", "limit=Inf", "limit=NaN", "limit=-99999999999999999999",
		"limit=0x1p4", "limit=1_000", "limit=1.0", "limit=1e-3", "limit=05",
		"after_seq=-1", "after_seq=x", "before_seq=-1", "before_seq=x",
		"after_seq=1&before_seq=5", "after_seq=99999999999999999999",
	} {
		alice.get(t, convPath(g.ID, "messages")+"?"+q).wantError(t, http.StatusBadRequest, "bad_request")
	}
	ws := alice.dial(t, "alice")
	for _, f := range []map[string]any{
		{"type": "sync", "conv": g.ID, "after_seq": 0, "limit": 0},
		{"type": "sync", "conv": g.ID, "after_seq": -1},
		{"type": "sync", "conv": g.ID},
		{"type": "sync", "conv": g.ID, "after_seq": "0"},
		{"type": "sync", "after_seq": 0},
	} {
		if r := ws.call(t, f); r.Type != "error" || r.Code != "bad_request" {
			t.Errorf("%v: got %s, want error bad_request", f, r)
		}
	}
}

func TestPagingLimitClamped(t *testing.T) {
	if testing.Short() {
		t.Skip("stores over 1000 messages")
	}
	ts := newServer(t, func(c *testConfig) { c.chat.SendRate, c.chat.SendBurst = 1e6, 1e6 })
	alice := ts.register(t, "alice")
	g := alice.group(t, "big")
	const n = 1105
	sendFast(t, alice, g.ID, n)

	p := alice.page(t, g.ID, "after_seq=0&limit=5000")
	if got, want := seqsOf(p.Messages), seqRange(1, 1000); !equalSeqs(got, want) || p.Completed {
		t.Errorf("limit=5000: got %d messages (completed %v), want 1..1000 not completed", len(got), p.Completed)
	}
	p = alice.page(t, g.ID, "after_seq=0")
	if got, want := seqsOf(p.Messages), seqRange(1, 100); !equalSeqs(got, want) || p.Completed {
		t.Errorf("default limit: got %d messages (completed %v), want 1..100 not completed", len(got), p.Completed)
	}
	p = alice.page(t, g.ID, "before_seq=100000&limit=5000")
	if got, want := seqsOf(p.Messages), seqRange(n-999, n); !equalSeqs(got, want) || p.Completed {
		t.Errorf("backward limit=5000: got %d messages (completed %v), want %d..%d not completed", len(got), p.Completed, n-999, n)
	}
	p = alice.page(t, g.ID, "after_seq=1000&limit=5000")
	if got, want := seqsOf(p.Messages), seqRange(1001, n); !equalSeqs(got, want) || !p.Completed {
		t.Errorf("last page: got %d messages (completed %v), want 1001..%d completed", len(got), p.Completed, n)
	}
	// Numbers beyond any integer are clamped too, not refused.
	for _, l := range []string{"99999999999999999999", "1e30"} {
		p = alice.page(t, g.ID, "after_seq=0&limit="+l)
		if got, want := seqsOf(p.Messages), seqRange(1, 1000); !equalSeqs(got, want) || p.Completed {
			t.Errorf("limit=%s: got %d messages (completed %v), want 1..1000 not completed", l, len(got), p.Completed)
		}
	}
	ws := alice.dial(t, "alice")
	for _, l := range []any{5000, json.Number("99999999999999999999"), json.Number("1e30")} {
		f := ws.call(t, map[string]any{"type": "sync", "conv": g.ID, "after_seq": 0, "limit": l})
		if got, want := seqsOf(f.Messages), seqRange(1, 1000); !equalSeqs(got, want) || f.Completed {
			t.Errorf("sync limit=%v: got %d messages (completed %v), want 1..1000 not completed", l, len(got), f.Completed)
		}
	}
}

// Both directions respect the caller's visible range: from its min_seq
// (join, clear) to its kick bound.
func TestPagingVisibleRange(t *testing.T) {
	ts := newServer(t)
	alice, late, kicked, cleared := ts.register(t, "alice"), ts.register(t, "late"), ts.register(t, "kicked"), ts.register(t, "cleared")
	g := alice.group(t, "team", kicked, cleared)
	sendFast(t, alice, g.ID, 10)                                                                                     // 1..10
	alice.post(t, convPath(g.ID, "members"), map[string]any{"user_ids": []string{late.ID()}}).want(t, http.StatusOK) // late: 11..
	sendFast(t, alice, g.ID, 5)                                                                                      // 11..15
	cleared.post(t, convPath(g.ID, "clear"), nil).want(t, http.StatusNoContent)                                      // cleared: 16..
	sendFast(t, alice, g.ID, 5)                                                                                      // 16..20
	alice.del(t, convPath(g.ID, "members", kicked.ID())).want(t, http.StatusNoContent)                               // kicked: ..20
	sendFast(t, alice, g.ID, 5)                                                                                      // 21..25

	type query struct {
		q         string
		lo, hi    int64
		completed bool
	}
	for _, tc := range []struct {
		who     *account
		maxSeq  int64
		queries []query
	}{
		{late, 25, []query{
			{"after_seq=0&limit=1000", 11, 25, true},
			{"after_seq=0&limit=5", 11, 15, false},
			{"after_seq=5&limit=6", 11, 16, false},
			{"before_seq=16&limit=10", 11, 15, true},
			{"before_seq=12&limit=1", 11, 11, true},
			{"before_seq=11&limit=10", 1, 0, true},
			{"before_seq=100&limit=5", 21, 25, false},
		}},
		{cleared, 25, []query{
			{"after_seq=0", 16, 25, true},
			{"after_seq=0&limit=10", 16, 25, true},
			{"before_seq=100&limit=10", 16, 25, true},
			{"before_seq=100&limit=9", 17, 25, false},
		}},
		{kicked, 20, []query{
			{"after_seq=0&limit=1000", 1, 20, true},
			{"after_seq=18&limit=1", 19, 19, false},
			{"after_seq=19&limit=1", 20, 20, true},
			{"after_seq=20", 1, 0, true},
			{"after_seq=22", 1, 0, true},
			{"before_seq=100&limit=5", 16, 20, false},
			{"before_seq=26&limit=20", 1, 20, true},
			{"before_seq=6&limit=20", 1, 5, true},
		}},
	} {
		ws := tc.who.dial(t, tc.who.User.Username)
		for _, q := range tc.queries {
			want := seqRange(q.lo, q.hi)
			p := tc.who.page(t, g.ID, q.q)
			if got := seqsOf(p.Messages); !equalSeqs(got, want) || p.Completed != q.completed || p.MaxSeq != tc.maxSeq {
				t.Errorf("%s GET ?%s: got %v completed %v max_seq %d, want %v completed %v max_seq %d",
					tc.who.User.Username, q.q, got, p.Completed, p.MaxSeq, want, q.completed, tc.maxSeq)
			}
			var after, limit int64
			if n, _ := fmt.Sscanf(q.q, "after_seq=%d&limit=%d", &after, &limit); n == 0 {
				continue
			}
			req := map[string]any{"type": "sync", "conv": g.ID, "after_seq": after}
			if limit > 0 {
				req["limit"] = limit
			}
			f := ws.call(t, req)
			if got := seqsOf(f.Messages); f.Type != "messages" || !equalSeqs(got, want) || f.Completed != q.completed || f.MaxSeq != tc.maxSeq {
				t.Errorf("%s sync %v: got %s, want %v completed %v max_seq %d", tc.who.User.Username, req, f, want, q.completed, tc.maxSeq)
			}
		}
	}
}
