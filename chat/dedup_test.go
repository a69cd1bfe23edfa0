package chat

import "testing"

func TestRecentIDsEvictOldest(t *testing.T) {
	r := newRecentIDs(2)
	r.add(Message{Conv: "c", From: "u", ClientMsgID: "a", Seq: 1})
	r.add(Message{Conv: "c", From: "u", ClientMsgID: "b", Seq: 2})
	r.add(Message{Conv: "c", From: "u", ClientMsgID: "a", Seq: 1}) // known: no eviction
	r.add(Message{Conv: "c", From: "u", ClientMsgID: "c", Seq: 3})
	if _, ok := r.get("c", "u", "a"); ok {
		t.Error("oldest entry kept past the bound")
	}
	for id, want := range map[string]int64{"b": 2, "c": 3} {
		if got, ok := r.get("c", "u", id); !ok || got != want {
			t.Errorf("get %s = %d, %v; want %d", id, got, ok, want)
		}
	}
	if _, ok := r.get("c", "v", "b"); ok {
		t.Error("another sender's id matched")
	}
	if len(r.m) != 2 {
		t.Errorf("%d entries, want 2", len(r.m))
	}
}
