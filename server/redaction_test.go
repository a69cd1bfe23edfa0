package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
)

// framedMessages decodes the messages of msg and batch frames of conv.
func framedMessages(t *testing.T, w *wsClient, conv string) []teamMessage {
	t.Helper()
	var out []teamMessage
	for _, f := range w.received(func(f frame) bool { return f.Type == "msg" || f.Type == "batch" }) {
		var v struct {
			Message  *teamMessage  `json:"message"`
			Messages []teamMessage `json:"messages"`
		}
		if err := json.Unmarshal(f.raw, &v); err != nil {
			t.Fatalf("decoding %s: %v", f, err)
		}
		if v.Message != nil {
			v.Messages = append(v.Messages, *v.Message)
		}
		for _, m := range v.Messages {
			if m.Conv == conv {
				out = append(out, m)
			}
		}
	}
	return out
}

// checkRedacted: the edit of seq reached bob (who saw the target) with its
// body, carol (who joined after it) with its seq and target only.
func checkRedacted(t *testing.T, what string, bob, carol []teamMessage, seq int64, body string) {
	t.Helper()
	find := func(ms []teamMessage) *teamMessage {
		for i := range ms {
			if ms[i].Seq == seq {
				return &ms[i]
			}
		}
		return nil
	}
	b, c := find(bob), find(carol)
	if b == nil || c == nil {
		t.Fatalf("%s: the edit at seq %d did not reach both (bob %v, carol %v)", what, seq, b != nil, c != nil)
	}
	if b.Body != body || b.Kind != "edit" {
		t.Fatalf("%s: bob, who saw the target, got %+v", what, *b)
	}
	if c.Body != "" || len(c.Mentions) != 0 || c.Kind != "edit" || c.Target != b.Target {
		t.Fatalf("%s: carol, who joined after the target, got %+v", what, *c)
	}
}

// TestEditOfOlderMessageRedacted: a member who joined after a message
// never learns its text through an edit of it: live (one at a time and in
// storm batches) and pulled (while a member and after leaving), the edit
// reaches it with its seq, kind and target (no hole in the stream) but no
// body.
func TestEditOfOlderMessageRedacted(t *testing.T) {
	ts := stormServer(t, nil, nil)
	alice, bob, carol := ts.register(t, "alice"), ts.register(t, "bob"), ts.register(t, "carol")
	g := alice.group(t, "team", bob)
	old := alice.send(t, g.ID, "old", "the old secret plan")
	alice.post(t, convPath(g.ID, "members"), map[string]any{"user_ids": []string{carol.ID()}}).want(t, http.StatusOK)
	wb, wc := bob.dial(t, "bob"), carol.dial(t, "carol")

	const body = "the new secret plan @bob"
	e := alice.edit(t, g.ID, old.Seq, body)
	wb.waitLiveSeq(t, g.ID, e.Seq)
	wc.waitLiveSeq(t, g.ID, e.Seq)
	checkRedacted(t, "live", framedMessages(t, wb, g.ID), framedMessages(t, wc, g.ID), e.Seq, body)
	checkRedacted(t, "pulled", bob.pull(t, g.ID), carol.pull(t, g.ID), e.Seq, body)

	// A storm: the edit travels in a batch among many texts.
	for i := range 30 {
		alice.send(t, g.ID, fmt.Sprintf("storm-%d", i), "busy")
	}
	e2 := alice.edit(t, g.ID, old.Seq, body+" again")
	last := alice.send(t, g.ID, "after", "after the edit")
	wb.waitLiveSeq(t, g.ID, last.Seq)
	wc.waitLiveSeq(t, g.ID, last.Seq)
	checkRedacted(t, "in a storm", framedMessages(t, wb, g.ID), framedMessages(t, wc, g.ID), e2.Seq, body+" again")
	if len(wc.received(ofType("batch"))) == 0 {
		t.Fatalf("no batch frame: the storm path was not taken:\n%s", wc.dump())
	}

	// A former member keeps its range, and the redaction.
	carol.post(t, convPath(g.ID, "leave"), nil).want(t, http.StatusNoContent)
	checkRedacted(t, "pulled after leaving", bob.pull(t, g.ID), carol.pull(t, g.ID), e2.Seq, body+" again")
}
