package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/imserver/imserver/chat"
	"github.com/prometheus/client_golang/prometheus"
)

func busMessagesOf(t *testing.T, ds []chat.Delivery) [][]byte {
	t.Helper()
	enc := busEncoder{node: "node-a"}
	for _, d := range ds {
		if d.Event.Type == chat.EventMessage {
			_, msg, err := encodeEvent(d.Event)
			if err != nil {
				t.Fatal(err)
			}
			enc.message(d.Users, d.Event, msg)
		} else if err := enc.event(d.Users, d.Event); err != nil {
			t.Fatal(err)
		}
	}
	return enc.messages()
}

// TestBusCodecRoundTrip: what a node encodes for the bus is read back
// entry by entry, in order, with the message's wire JSON as encodeEvent
// makes it and the other events as JSON, and the stamped publish seq.
func TestBusCodecRoundTrip(t *testing.T) {
	m1 := &chat.Message{Conv: "c1", Seq: 7, From: "u1", Body: "héllo \"you\"", ClientMsgID: "k1", Origin: "sess-1"}
	m2 := &chat.Message{Conv: "c2", Seq: 1 << 40, From: "u2", Body: strings.Repeat("x", 300)}
	ds := []chat.Delivery{
		{Users: []string{"u1", "u2", "u3"}, Event: &chat.Event{Type: chat.EventMessage, Conv: "c1", ExceptSession: "sess-1", Message: m1}},
		{Users: []string{"u9"}, Event: &chat.Event{Type: chat.EventRead, Conv: "c1", Seq: 5}},
		{Users: []string{"u2"}, Event: &chat.Event{Type: chat.EventMessage, Conv: "c2", Message: m2}},
	}
	out := busMessagesOf(t, ds)
	if len(out) != 1 {
		t.Fatalf("%d bus messages, want 1", len(out))
	}
	stampBinary(out[0], 42)
	var got []busEntry
	var node string
	var seq uint64
	err := decodeBus(string(out[0]), func(n string, s uint64) bool { node, seq = n, s; return true },
		func(e *busEntry) { got = append(got, *e) })
	if err != nil {
		t.Fatal(err)
	}
	if node != "node-a" || seq != 42 {
		t.Fatalf("head %q %d, want node-a 42", node, seq)
	}
	if len(got) != 3 {
		t.Fatalf("%d entries, want 3", len(got))
	}
	_, want1, _ := encodeEvent(ds[0].Event)
	e := got[0]
	if e.event || strings.Join(e.users, ",") != "u1,u2,u3" || e.conv != "c1" || e.seq != 7 || e.origin != "sess-1" || e.except != "sess-1" || e.body != string(want1) {
		t.Fatalf("entry 0 = %+v", e)
	}
	var w wireEvent
	if !got[1].event || strings.Join(got[1].users, ",") != "u9" || json.Unmarshal([]byte(got[1].body), &w) != nil || w.Type != chat.EventRead || w.Seq != 5 {
		t.Fatalf("entry 1 = %+v", got[1])
	}
	_, want2, _ := encodeEvent(ds[2].Event)
	if got[2].seq != 1<<40 || got[2].body != string(want2) || !json.Valid([]byte(got[2].body)) {
		t.Fatalf("entry 2 = %+v", got[2])
	}
	// A message of this node is not read past its head.
	n := 0
	if err := decodeBus(string(out[0]), func(string, uint64) bool { return false }, func(*busEntry) { n++ }); err != nil || n != 0 {
		t.Fatalf("refused head: %v, %d entries", err, n)
	}
}

// TestBusCodecSplitsBigFanOut: a commit's fan-out bigger than busMaxBytes
// leaves as several bus messages, every entry in one of them, in order.
func TestBusCodecSplitsBigFanOut(t *testing.T) {
	var ds []chat.Delivery
	for i := int64(1); i <= 2000; i++ {
		m := &chat.Message{Conv: "c", Seq: i, Body: strings.Repeat("b", 200)}
		ds = append(ds, chat.Delivery{Users: []string{"u1", "u2"}, Event: &chat.Event{Type: chat.EventMessage, Conv: "c", Message: m}})
	}
	out := busMessagesOf(t, ds)
	if len(out) < 2 {
		t.Fatalf("%d bus messages for %d bytes of messages, want several", len(out), 2000*200)
	}
	next := int64(1)
	for _, p := range out {
		if len(p) > busMaxBytes+1024 {
			t.Fatalf("bus message of %d bytes", len(p))
		}
		if err := decodeBus(string(p), func(string, uint64) bool { return true }, func(e *busEntry) {
			if e.seq != next {
				t.Fatalf("seq %d, want %d", e.seq, next)
			}
			next++
		}); err != nil {
			t.Fatal(err)
		}
	}
	if next != 2001 {
		t.Fatalf("read %d entries, want 2000", next-1)
	}
}

// FuzzBusDecode: damaged bus messages give an error or entries, never a
// panic or a read past the payload.
func FuzzBusDecode(f *testing.F) {
	enc := busEncoder{node: "n"}
	m := &chat.Message{Conv: "c", Seq: 3, Body: "hi"}
	ev := &chat.Event{Type: chat.EventMessage, Conv: "c", Message: m}
	_, msg, _ := encodeEvent(ev)
	enc.message([]string{"a", "b"}, ev, msg)
	_ = enc.event([]string{"a"}, &chat.Event{Type: chat.EventTyping, Conv: "c", User: "a"})
	good := enc.messages()[0]
	f.Add(good)
	f.Add(good[:len(good)-3])
	f.Add([]byte(busMagic))
	f.Add(append([]byte(busMagic), 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01))
	f.Fuzz(func(t *testing.T, p []byte) {
		_ = decodeBus(string(p), func(string, uint64) bool { return true }, func(e *busEntry) {
			_ = len(e.body) + len(e.users)
		})
	})
}

// TestBusQueueBoundedByBytes: a stalled Redis makes the bus hold at most
// busQueueBytes of events (each message is a whole commit's fan-out);
// the rest is dropped and counted, as a full queue always was.
func TestBusQueueBoundedByBytes(t *testing.T) {
	b := &Bus{out: make(chan []byte, 8192), metrics: NewMetrics()}
	msg := make([]byte, 256<<10)
	for range 300 {
		b.queue(msg)
	}
	if n := len(b.out); n != busQueueBytes/len(msg) {
		t.Fatalf("%d messages of %d bytes queued, want %d", n, len(msg), busQueueBytes/len(msg))
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(b.metrics.BusDropped)
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 {
		t.Fatalf("gather: %v %v", mfs, err)
	}
	if got := mfs[0].GetMetric()[0].GetCounter().GetValue(); got != float64(300-busQueueBytes/len(msg)) {
		t.Fatalf("dropped %v, want %d", got, 300-busQueueBytes/len(msg))
	}
	<-b.out
	b.outBytes.Add(-int64(len(msg))) // as publishLoop does
	b.queue(msg)
	if len(b.out) != busQueueBytes/len(msg) {
		t.Fatalf("no room again after one left")
	}
}
