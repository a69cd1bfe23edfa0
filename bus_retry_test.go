package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestRedisBusRetryDeliversOnce: a PUBLISH that Redis carried out but
// whose answer was lost is sent again by the client's retry. The other
// process must not deliver its message a second time. The test plays the
// retry: it hears a real publish of process A on the bus and publishes the
// same bytes again.
func TestRedisBusRetryDeliversOnce(t *testing.T) {
	pair := startRedisPair(t, "bus.db")
	r, a, b := pair.r, pair.a, pair.b
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	alice, bob := registerUser(t, a, "alice"), registerUser(t, a, "bob")
	conv := newDirect(t, a, alice, bob)
	bobB := dialWS(t, ctx, b, "bob@B", bob.Token)

	rdb := redis.NewClient(&redis.Options{Addr: r.addr()})
	defer rdb.Close()
	sub := rdb.Subscribe(ctx, "imserver:bus")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatalf("subscribe: %v", err)
	}

	first := httpSend(a, alice.Token, conv, "first", "only once, please")
	if !first.ok() {
		t.Fatalf("send through A: %+v", first)
	}
	var payload string
	for payload == "" {
		msg, err := sub.ReceiveMessage(ctx)
		if err != nil {
			t.Fatalf("no publish of the message heard on the bus: %v", err)
		}
		if strings.Contains(msg.Payload, "only once, please") {
			payload = msg.Payload
		}
	}
	if err := rdb.Publish(ctx, "imserver:bus", payload).Err(); err != nil {
		t.Fatalf("republish: %v", err)
	}
	last := httpSend(a, alice.Token, conv, "last", "marker")
	if !last.ok() {
		t.Fatalf("send through A: %+v", last)
	}
	if !bobB.waitFor(10*time.Second, func() bool {
		for _, m := range bobB.live {
			if m.Seq == last.Seq {
				return true
			}
		}
		return false
	}) {
		t.Fatalf("bob on B never got the marker")
	}
	n := 0
	for _, m := range bobB.liveCopy() {
		if m.Seq == first.Seq {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("bob on B got message seq %d %d times, want once", first.Seq, n)
	}
}
