package server

import (
	"fmt"
	"strings"
	"testing"
)

func msgItem(conv string, seq int) *outItem {
	m := fmt.Sprintf(`{"conv":%q,"seq":%d}`, conv, seq)
	return &outItem{conv: conv, msg: []byte(m), frame: []byte(`{"type":"msg","message":` + m + `}`)}
}

// Messages of one conversation in a round leave as one batch frame where
// the first stood; messages of distinct conversations, replies and other
// events leave as their own frames, in order.
func TestCoalesce(t *testing.T) {
	reply := &outItem{frame: []byte(`{"type":"sent"}`), reply: true}
	read := &outItem{frame: []byte(`{"type":"read"}`)}
	cases := []struct {
		name  string
		items []*outItem
		want  []string
	}{
		{"distinct conversations", []*outItem{msgItem("a", 1), reply, msgItem("b", 1), msgItem("c", 1)},
			[]string{`{"type":"msg","message":{"conv":"a","seq":1}}`, `{"type":"sent"}`, `{"type":"msg","message":{"conv":"b","seq":1}}`, `{"type":"msg","message":{"conv":"c","seq":1}}`}},
		{"one conversation twice, across a reply", []*outItem{msgItem("a", 1), msgItem("b", 1), reply, msgItem("a", 2)},
			[]string{`{"type":"batch","conv":"a","messages":[{"conv":"a","seq":1},{"conv":"a","seq":2}]}`, `{"type":"msg","message":{"conv":"b","seq":1}}`, `{"type":"sent"}`}},
		{"an event is a barrier", []*outItem{msgItem("a", 1), read, msgItem("a", 2)},
			[]string{`{"type":"msg","message":{"conv":"a","seq":1}}`, `{"type":"read"}`, `{"type":"msg","message":{"conv":"a","seq":2}}`}},
	}
	many := make([]*outItem, 20)
	for i := range many {
		many[i] = msgItem(fmt.Sprint("c", i), 1)
	}
	var manyWant []string
	for _, it := range many {
		manyWant = append(manyWant, string(it.frame))
	}
	cases = append(cases, struct {
		name  string
		items []*outItem
		want  []string
	}{"twenty distinct conversations", many, manyWant})
	// One coalescer for every round, twice over, as a session's writer
	// keeps it: a round's frames must not carry what an earlier one left
	// in its buffers.
	var co coalescer
	for range 2 {
		for _, c := range cases {
			var got []string
			for _, f := range co.round(c.items) {
				got = append(got, string(f))
			}
			if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Errorf("%s:\n got %q\nwant %q", c.name, got, c.want)
			}
		}
	}
}

// Once its buffers have grown, a session's coalescer allocates nothing,
// whether a round batches (a busy group) or not (people talking).
func TestCoalescerReusesItsBuffers(t *testing.T) {
	talk := []*outItem{msgItem("a", 1), {frame: []byte(`{"type":"sent"}`), reply: true}, msgItem("b", 1), msgItem("c", 1)}
	var busy []*outItem
	for i := range 40 {
		busy = append(busy, msgItem(fmt.Sprint("c", i%3), i))
	}
	for name, items := range map[string][]*outItem{"talk": talk, "busy": busy} {
		var co coalescer
		co.round(items)
		if n := testing.AllocsPerRun(100, func() { co.round(items) }); n != 0 {
			t.Errorf("%s: %.0f allocations per round, want 0", name, n)
		}
	}
}
