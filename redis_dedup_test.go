package main

import (
	"fmt"
	"testing"
)

// TestRedisRetryOnOtherProcess: two processes share one database file,
// each with its own dedup level in memory (storage/dedup_mem.go). A retry
// sent to the process that did not store the message gets the first seq
// (PROTOCOL guarantee 3), and so does one sent after the process that
// stored it was killed with SIGKILL and started again (its level is read
// back from the messages table).
func TestRedisRetryOnOtherProcess(t *testing.T) {
	pair := startRedisPair(t, "two.db")
	a, b := pair.a, pair.b
	alice := registerUser(t, a, "alice")
	bob := registerUser(t, b, "bob")
	group := newGroup(t, a, alice, bob)

	first := map[string]int64{} // client_msg_id -> seq
	send := func(p *lproc, who rUser, id string) {
		t.Helper()
		res := httpSend(p, who.Token, group, id, "body of "+id)
		if res.Status != 201 || res.Dup {
			t.Fatalf("send %s: status %d dup %v code %q err %v, want 201", id, res.Status, res.Dup, res.Code, res.Err)
		}
		first[id] = res.Seq
	}
	retry := func(label string, p *lproc, id string) {
		t.Helper()
		who := alice
		if id[0] == 'b' {
			who = bob
		}
		res := httpSend(p, who.Token, group, id, "retried")
		if res.Status != 200 || !res.Dup || res.Seq != first[id] {
			t.Errorf("%s: retry of %s: status %d dup %v seq %d code %q err %v, want 200, a duplicate of seq %d",
				label, id, res.Status, res.Dup, res.Seq, res.Code, res.Err, first[id])
		}
	}
	for i := range 30 {
		send(a, alice, fmt.Sprint("a-", i))
		send(b, bob, fmt.Sprint("b-", i))
	}
	for i := range 30 {
		retry("on the other process", b, fmt.Sprint("a-", i))
		retry("on the other process", a, fmt.Sprint("b-", i))
	}

	// A dies before its level is moved to the file; the next A reads it
	// back, and B's level (alive) still answers for A's messages.
	a.kill()
	for i := range 10 {
		send(b, bob, fmt.Sprint("b-after-", i))
	}
	a = startLogged(t, "A again", pair.db, pair.cfg)
	for id := range first {
		retry("after A's restart", a, id)
		retry("after A's restart, on B", b, id)
	}
	if t.Failed() {
		return
	}
	// New sends on the restarted A carry on above every seq, and B
	// answers their retries.
	send(a, alice, "a-new")
	for id, seq := range first {
		if id != "a-new" && seq >= first["a-new"] {
			t.Errorf("%s has seq %d, not below the new message's %d", id, seq, first["a-new"])
		}
	}
	retry("new message, on B", b, "a-new")
}
