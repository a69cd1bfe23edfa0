package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"unicode/utf8"

	"github.com/imserver/imserver/chat"
)

// Client frame types.
const (
	frameSend = "send"
	frameAck  = "ack"
	frameRead = "read"
	frameSync = "sync"
	framePing = "ping"
	// typing is ephemeral: relayed to the conversation's other online
	// members, never stored, never answered.
	frameTyping = "typing"
)

// clientFrame is any frame a client sends. Pointers tell a missing field
// from a zero one.
type clientFrame struct {
	Type        string      `json:"type"`
	Req         reqID       `json:"req"`
	Conv        string      `json:"conv"`
	ClientMsgID string      `json:"client_msg_id"`
	Body        *string     `json:"body"`
	Kind        string      `json:"kind"`
	Target      *int64      `json:"target"`
	Emoji       string      `json:"emoji"`
	On          *bool       `json:"on"`
	ReplyTo     *int64      `json:"reply_to"`
	Seq         *int64      `json:"seq"`
	AfterSeq    *int64      `json:"after_seq"`
	Limit       *frameLimit `json:"limit"`
	Attachments []string    `json:"attachments"`
}

// reqID is a client frame's req, any string, echoed on the reply whenever
// the frame carried one: "" too, which a client matching replies by req
// must get back (PROTOCOL.md, WebSocket). Absent (or null) it stays out of
// the reply.
type reqID struct {
	s   string
	set bool
}

func (r *reqID) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil // as encoding/json leaves a string field
	}
	if err := json.Unmarshal(b, &r.s); err != nil {
		return err
	}
	r.set = true
	return nil
}

// MarshalJSON writes the string; omitzero leaves out a req never set.
func (r reqID) MarshalJSON() ([]byte, error) { return json.Marshal(r.s) }

// frameLimit is a sync frame's limit. A whole number too large for an
// integer is as large as one: the protocol clamps large limits, it does
// not refuse them. A value that is no limit becomes badFrameLimit, which
// check refuses: an error from UnmarshalJSON would stop encoding/json
// before it read the rest of the frame, its req included.
type frameLimit int

const badFrameLimit frameLimit = math.MinInt32

func (l *frameLimit) UnmarshalJSON(b []byte) error {
	n, ok := limitNumber(string(b))
	if !ok {
		*l = badFrameLimit
		return nil
	}
	// Saturated to 32 bits, keeping the sign that decides between a page
	// and a refusal (and above badFrameLimit).
	*l = frameLimit(max(min(n, math.MaxInt32), math.MinInt32+1))
	return nil
}

// decodeFrame parses and checks a client frame, one JSON object. On error
// it still returns the req it could read, for the error reply.
func decodeFrame(data []byte) (clientFrame, error) {
	if !utf8.Valid(data) {
		// Decoded, the bad bytes would become U+FFFD; only req is kept,
		// for the error frame.
		var f clientFrame
		_ = json.Unmarshal(data, &f)
		return clientFrame{Req: f.Req}, errNotUTF8
	}
	f, ok := scanFrame(data)
	if !ok {
		f = clientFrame{}
		if err := json.Unmarshal(data, &f); err != nil {
			// A field of the wrong type does not stop the others from
			// being decoded; with more than one object, req is the first
			// one's.
			req := f.Req
			if !req.set {
				var first clientFrame
				_ = json.NewDecoder(bytes.NewReader(data)).Decode(&first)
				req = first.Req
			}
			return clientFrame{Req: req}, chat.Errorf(chat.EBadRequest, "invalid frame: %v", err)
		}
	}
	if err := f.check(); err != nil {
		return f, err
	}
	return f, nil
}

func (f *clientFrame) check() error {
	need := func(ok bool, field string) error {
		if !ok {
			return chat.Errorf(chat.EBadRequest, "%s frame needs %s", f.Type, field)
		}
		return nil
	}
	switch f.Type {
	case frameSend:
		if err := need(f.Conv != "", "conv"); err != nil {
			return err
		}
		if err := need(f.ClientMsgID != "", "client_msg_id"); err != nil {
			return err
		}
		if !bodyOptional(f.Kind) && len(f.Attachments) == 0 {
			return need(f.Body != nil, "body")
		}
		return nil
	case frameTyping:
		return need(f.Conv != "", "conv")
	case frameAck, frameRead:
		if err := need(f.Conv != "", "conv"); err != nil {
			return err
		}
		if err := need(f.Seq != nil, "seq"); err != nil {
			return err
		}
		return need(*f.Seq >= 0, "seq >= 0")
	case frameSync:
		if err := need(f.Conv != "", "conv"); err != nil {
			return err
		}
		if err := need(f.AfterSeq != nil, "after_seq"); err != nil {
			return err
		}
		if err := need(*f.AfterSeq >= 0, "after_seq >= 0"); err != nil {
			return err
		}
		if f.Limit != nil && *f.Limit == badFrameLimit {
			return chat.Errorf(chat.EBadRequest, "limit must be an integer")
		}
		if f.Limit != nil && *f.Limit < 1 {
			return chat.Errorf(chat.EBadRequest, "limit must be >= 1")
		}
		return nil
	case framePing:
		return nil
	case "":
		return chat.Errorf(chat.EBadRequest, "frame needs a type")
	default:
		return chat.Errorf(chat.EBadRequest, "unknown frame type %q", f.Type)
	}
}

// bodyOptional reports whether a send of kind may leave out body (a
// delete or a reaction has none).
func bodyOptional(kind string) bool {
	return kind == chat.KindDelete || kind == chat.KindReaction
}

// sendRequest turns a send frame or body into the domain's request.
func sendRequest(conv, clientMsgID string, body *string, kind string, target *int64, emoji string, on *bool, replyTo *int64, attachments []string) chat.SendRequest {
	r := chat.SendRequest{Conv: conv, ClientMsgID: clientMsgID, Kind: kind, Emoji: emoji, On: on, Attachments: attachments}
	if body != nil {
		r.Body = *body
	}
	if target != nil {
		r.Target = *target
	}
	if replyTo != nil {
		r.ReplyTo = *replyTo
	}
	return r
}

// Server frames. Each is encoded once per event, whatever the number of
// recipients.
type (
	helloFrame struct {
		Type      string    `json:"type"`
		User      chat.User `json:"user"`
		Session   string    `json:"session"`
		Sequences sequences `json:"sequences"`
		// Online are the caller's contacts online now (v1.1).
		Online []string `json:"online"`
	}
	sequences struct {
		Conversations int64 `json:"conversations"`
	}
	sentFrame struct {
		Type      string       `json:"type"`
		Req       reqID        `json:"req,omitzero"`
		Message   chat.Message `json:"message"`
		Duplicate bool         `json:"duplicate"`
	}
	messagesFrame struct {
		Type      string         `json:"type"`
		Req       reqID          `json:"req,omitzero"`
		Conv      string         `json:"conv"`
		Messages  []chat.Message `json:"messages"`
		MaxSeq    int64          `json:"max_seq"`
		Completed bool           `json:"completed"`
	}
	pongFrame struct {
		Type string `json:"type"`
		Req  reqID  `json:"req,omitzero"`
	}
	errorFrame struct {
		Type         string `json:"type"`
		Req          reqID  `json:"req,omitzero"`
		Code         string `json:"code"`
		Message      string `json:"message"`
		RetryAfterMS int64  `json:"retry_after_ms,omitempty"`
	}
	readFrame struct {
		Type string `json:"type"`
		Conv string `json:"conv"`
		Seq  int64  `json:"seq"`
	}
	receiptFrame struct {
		Type  string      `json:"type"`
		Conv  string      `json:"conv"`
		User  string      `json:"user"`
		Seq   int64       `json:"seq"`
		Reads []chat.Read `json:"reads,omitempty"`
	}
	conversationFrame struct {
		Type         string             `json:"type"`
		Conversation *chat.Conversation `json:"conversation"`
	}
	stormFrame struct {
		Type     string `json:"type"`
		Conv     string `json:"conv"`
		Active   bool   `json:"active"`
		Count    int    `json:"count"`
		WindowMS int64  `json:"window_ms"`
	}
	typingFrame struct {
		Type string `json:"type"`
		Conv string `json:"conv"`
		User string `json:"user"`
	}
	presenceFrame struct {
		Type   string `json:"type"`
		User   string `json:"user"`
		Online bool   `json:"online"`
	}
	convFrame struct {
		Type string `json:"type"`
		Conv string `json:"conv"`
	}
)

func errorFrameOf(req reqID, err error) errorFrame {
	b := toErrorBody(err)
	return errorFrame{Type: "error", Req: req, Code: b.Code, Message: b.Message, RetryAfterMS: b.RetryAfterMS}
}

// msgFrameHead opens a msg frame; the message's JSON and '}' follow.
const msgFrameHead = `{"type":"msg","message":`

// encodeEvent returns the frame of ev and, for a message, the message alone
// (for batch frames).
func encodeEvent(ev *chat.Event) (frame, msg []byte, err error) {
	var v any
	switch ev.Type {
	case chat.EventMessage:
		// msg is a slice of the frame: batch frames copy it from there.
		frame = make([]byte, 0, 32+messageCap(ev.Message))
		frame = append(frame, msgFrameHead...)
		head := len(frame)
		frame = appendMessage(frame, ev.Message)
		msg = frame[head:len(frame):len(frame)]
		frame = append(frame, '}')
		return frame, msg, nil
	case chat.EventRead:
		v = readFrame{Type: "read", Conv: ev.Conv, Seq: ev.Seq}
	case chat.EventReceipt:
		v = receiptFrame{Type: "receipt", Conv: ev.Conv, User: ev.User, Seq: ev.Seq, Reads: ev.Reads}
	case chat.EventConversation:
		v = conversationFrame{Type: "conversation", Conversation: ev.Conversation}
	case chat.EventTyping:
		v = typingFrame{Type: "typing", Conv: ev.Conv, User: ev.User}
	case chat.EventPresence:
		v = presenceFrame{Type: "presence", User: ev.User, Online: ev.Active}
	case chat.EventStorm:
		v = stormFrame{Type: "storm", Conv: ev.Conv, Active: ev.Active, Count: ev.Count, WindowMS: ev.WindowMS}
	default:
		return nil, nil, fmt.Errorf("unknown event %q", ev.Type)
	}
	frame, err = json.Marshal(v)
	return frame, nil, err
}

// batchFrame returns the batch frame of encoded messages of one
// conversation.
func batchFrame(conv string, msgs [][]byte) []byte {
	n := 40 + len(conv)
	for _, m := range msgs {
		n += len(m) + 1
	}
	return appendBatchFrame(make([]byte, 0, n), conv, msgs)
}

// appendBatchFrame appends the batch frame of encoded messages of one
// conversation to b.
func appendBatchFrame(b []byte, conv string, msgs [][]byte) []byte {
	b = append(b, `{"type":"batch","conv":`...)
	b = appendString(b, conv)
	b = append(b, `,"messages":[`...)
	for i, m := range msgs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, m...)
	}
	return append(b, "]}"...)
}
