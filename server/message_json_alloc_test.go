package server

import (
	"strings"
	"testing"

	"github.com/imserver/imserver/chat"
)

// benchMessage is a message as the interactive bench sends it: ids as the
// server makes them, a 64-byte body.
func benchMessage() *chat.Message {
	return &chat.Message{Conv: chat.NewID(), Seq: 1234567, From: chat.NewID(), ClientMsgID: chat.NewID() + "-123456",
		Kind: chat.KindText, Body: "bench:12345678901:" + strings.Repeat("x", 46), TS: 1764070000000}
}

// A message's frame and its sender's `sent` are each encoded into one
// allocation: every message is encoded twice on the hot path.
func TestMessageFramesAllocateOnce(t *testing.T) {
	for _, body := range []string{"", "hi", strings.Repeat("y", 64), strings.Repeat("z", 4000)} {
		m := benchMessage()
		m.Body = body
		messageFramesAllocateOnce(t, m)
	}
}

func messageFramesAllocateOnce(t *testing.T, m *chat.Message) {
	t.Helper()
	ev := &chat.Event{Type: chat.EventMessage, Conv: m.Conv, Message: m}
	if n := testing.AllocsPerRun(100, func() { encodeEvent(ev) }); n > 1 {
		t.Errorf("encodeEvent, body of %d bytes: %.0f allocations, want 1", len(m.Body), n)
	}
	req := reqID{s: m.ClientMsgID, set: true}
	if n := testing.AllocsPerRun(100, func() { sentReply(req, m, false) }); n > 1 {
		t.Errorf("sentReply, body of %d bytes: %.0f allocations, want 1", len(m.Body), n)
	}
}

func BenchmarkEncodeMessage(b *testing.B) {
	m := benchMessage()
	ev := &chat.Event{Type: chat.EventMessage, Conv: m.Conv, Message: m}
	b.Run("msg", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			encodeEvent(ev)
		}
	})
	b.Run("sent", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			sentReply(reqID{s: m.ClientMsgID, set: true}, m, false)
		}
	})
}
