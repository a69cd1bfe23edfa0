package bench

import (
	"encoding/binary"
	"encoding/json"
	"math"
)

// frame is a decoded server → client frame, reduced to what the bench reads.
//
// Every delivery is decoded, so decoding must not allocate per message: the
// byte slices of a frame (and of its messages) point into the bytes it was
// decoded from, and the storage behind Message and Messages is reused by the
// next decodeFrame into the same frame. A frame is therefore only valid
// until the next frame is read; nothing may keep its slices (copy them, e.g.
// with string(), to keep them).
type frame struct {
	Type         string // interned: the types the bench knows cost no allocation
	Req          []byte
	Conv         []byte
	Message      *message  // msg, sent
	Messages     []message // batch, messages; nil when absent
	Duplicate    bool
	MaxSeq       int64
	Completed    *bool
	Code         string
	RetryAfterMS int64
	Active       bool

	// Storage reused from one frame to the next.
	msg       message
	msgs      []message
	completed bool
}

// message is PROTOCOL.md's message object as the bench checks it: the fields
// it reads, as views into the frame (see frame).
type message struct {
	Conv        []byte
	Seq         int64
	From        []byte
	ClientMsgID []byte
	Body        []byte
}

// decodeFrame parses b into f, reusing f's storage. The common shapes go
// through a small hand-written scanner (reflection-based decoding of every
// delivery was a third of the bench's CPU); anything it does not handle
// (escapes, floats where ints belong, other surprises) falls back to
// encoding/json, which also yields the error.
func decodeFrame(b []byte, f *frame) error {
	f.reset()
	sc := scanner{b: b}
	if sc.frame(f) {
		return nil
	}
	return decodeFrameJSON(b, f)
}

func (f *frame) reset() {
	*f = frame{msgs: f.msgs[:0]}
}

// inFrame is the encoding/json shape of a frame. `message` is an object in
// msg/sent frames but a string in error frames, so it is decoded by type.
type inFrame struct {
	Type         string          `json:"type"`
	Req          string          `json:"req"`
	Conv         string          `json:"conv"`
	Message      json.RawMessage `json:"message"`
	Messages     []wireMessage   `json:"messages"`
	Duplicate    bool            `json:"duplicate"`
	MaxSeq       int64           `json:"max_seq"`
	Completed    *bool           `json:"completed"`
	Code         string          `json:"code"`
	RetryAfterMS int64           `json:"retry_after_ms"`
	Active       bool            `json:"active"`
}

// decodeFrameJSON is the slow path: encoding/json, then copies into f.
func decodeFrameJSON(b []byte, f *frame) error {
	f.reset()
	var in inFrame
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	f.Type, f.Req, f.Conv = in.Type, []byte(in.Req), []byte(in.Conv)
	f.Duplicate, f.MaxSeq, f.Completed = in.Duplicate, in.MaxSeq, in.Completed
	f.Code, f.RetryAfterMS, f.Active = in.Code, in.RetryAfterMS, in.Active
	if in.Messages != nil {
		f.Messages = make([]message, len(in.Messages))
		for i := range in.Messages {
			f.Messages[i] = in.Messages[i].view()
		}
	}
	if len(in.Message) > 0 && in.Message[0] == '{' {
		var m wireMessage
		if err := json.Unmarshal(in.Message, &m); err != nil {
			return err
		}
		f.msg = m.view()
		f.Message = &f.msg
	}
	return nil
}

// internType returns the frame types the bench knows as constants, so that
// reading the type of a frame allocates nothing.
func internType(b []byte) string {
	switch string(b) {
	case "msg":
		return "msg"
	case "batch":
		return "batch"
	case "sent":
		return "sent"
	case "messages":
		return "messages"
	case "resync":
		return "resync"
	case "error":
		return "error"
	case "storm":
		return "storm"
	case "hello":
		return "hello"
	case "pong":
		return "pong"
	case "read":
		return "read"
	case "receipt":
		return "receipt"
	case "conversation":
		return "conversation"
	}
	return string(b)
}

// parseInt reads a JSON integer (an optional '-' and digits, no leading
// zeros) without allocating; false on anything else, or on overflow.
func parseInt(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 1 && b[0] == '0' {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' || n > (math.MaxInt64-9)/10 {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	if neg {
		return -int64(n), true
	}
	return int64(n), true
}

// scanner reads the JSON subset the fast path accepts. Every method returns
// false on anything unexpected, sending the frame to encoding/json.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) peek() byte {
	if s.i < len(s.b) && s.b[s.i] > ' ' {
		return s.b[s.i] // no whitespace: the server's compact JSON
	}
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func (s *scanner) eat(c byte) bool {
	if s.peek() == c {
		s.i++
		return true
	}
	return false
}

// rawString returns the bytes of a string without escapes (a view into s.b).
func (s *scanner) rawString() ([]byte, bool) {
	if !s.eat('"') {
		return nil, false
	}
	start := s.i
	// Message bodies make most of the bytes: look at 8 at a time for one
	// that ends the fast path's string ('"', '\\' or a control character).
	for s.i+8 <= len(s.b) && !stringStop(binary.LittleEndian.Uint64(s.b[s.i:])) {
		s.i += 8
	}
	for s.i < len(s.b) {
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return s.b[start : s.i-1], true
		case c == '\\' || c < 0x20:
			return nil, false
		}
		s.i++
	}
	return nil, false
}

// stringStop reports whether one of the 8 bytes in v is '"', '\\' or below
// 0x20 (the bit tricks of "Bit Twiddling Hacks": a byte of x is zero, or below
// n, where (x - n*lo) & ^x & hi has its top bit set; exact as a whole).
func stringStop(v uint64) bool {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	quote := v ^ (lo * '"')
	backslash := v ^ (lo * '\\')
	return ((quote-lo)&^quote|(backslash-lo)&^backslash|(v-lo*0x20)&^v)&hi != 0
}

func (s *scanner) int() (int64, bool) {
	s.ws()
	start := s.i
	for s.i < len(s.b) && (s.b[s.i] == '-' || s.b[s.i] >= '0' && s.b[s.i] <= '9') {
		s.i++
	}
	if s.i < len(s.b) {
		if c := s.b[s.i]; c == '.' || c == 'e' || c == 'E' {
			return 0, false
		}
	}
	return parseInt(s.b[start:s.i])
}

func (s *scanner) literal(word string) bool {
	s.ws()
	if len(s.b)-s.i >= len(word) && string(s.b[s.i:s.i+len(word)]) == word {
		s.i += len(word)
		return true
	}
	return false
}

func (s *scanner) bool() (bool, bool) {
	switch {
	case s.literal("true"):
		return true, true
	case s.literal("false"):
		return false, true
	}
	return false, false
}

// skip passes over any value.
func (s *scanner) skip() bool {
	switch s.peek() {
	case '"':
		_, ok := s.rawString()
		return ok
	case '{':
		return s.object(func(key []byte) bool { return s.skip() })
	case '[':
		s.i++
		if s.eat(']') {
			return true
		}
		for {
			if !s.skip() {
				return false
			}
			if s.eat(']') {
				return true
			}
			if !s.eat(',') {
				return false
			}
		}
	case 't':
		return s.literal("true")
	case 'f':
		return s.literal("false")
	case 'n':
		return s.literal("null")
	default:
		start := s.i
		for s.i < len(s.b) && (s.b[s.i] == '-' || s.b[s.i] == '+' || s.b[s.i] == '.' || s.b[s.i] == 'e' ||
			s.b[s.i] == 'E' || s.b[s.i] >= '0' && s.b[s.i] <= '9') {
			s.i++
		}
		return s.i > start
	}
}

// object calls field for each key, positioned on its value; field must
// consume the value.
func (s *scanner) object(field func(key []byte) bool) bool {
	if !s.eat('{') {
		return false
	}
	if s.eat('}') {
		return true
	}
	for {
		key, ok := s.rawString()
		if !ok || !s.eat(':') || !field(key) {
			return false
		}
		if s.eat('}') {
			return true
		}
		if !s.eat(',') {
			return false
		}
	}
}

func (s *scanner) message(m *message) bool {
	return s.object(func(key []byte) bool {
		var ok bool
		switch string(key) {
		case "conv":
			m.Conv, ok = s.rawString()
		case "seq":
			m.Seq, ok = s.int()
		case "from":
			m.From, ok = s.rawString()
		case "client_msg_id":
			m.ClientMsgID, ok = s.rawString()
		case "body":
			m.Body, ok = s.rawString()
		default:
			ok = s.skip()
		}
		return ok
	})
}

// messages reads an array of message objects, appending to msgs.
func (s *scanner) messages(msgs []message) ([]message, bool) {
	if !s.eat('[') {
		return msgs, false
	}
	if s.eat(']') {
		return msgs, true
	}
	for {
		msgs = append(msgs, message{})
		if !s.message(&msgs[len(msgs)-1]) {
			return msgs, false
		}
		if s.eat(']') {
			return msgs, true
		}
		if !s.eat(',') {
			return msgs, false
		}
	}
}

func (s *scanner) frame(f *frame) bool {
	ok := s.object(func(key []byte) bool {
		var ok bool
		switch string(key) {
		case "type":
			var t []byte
			if t, ok = s.rawString(); ok {
				f.Type = internType(t)
			}
		case "req":
			if s.peek() != '"' {
				return s.skip()
			}
			f.Req, ok = s.rawString()
		case "conv":
			f.Conv, ok = s.rawString()
		case "message":
			if s.peek() != '{' {
				return s.skip() // an error frame's text
			}
			f.msg = message{}
			f.Message = &f.msg
			ok = s.message(f.Message)
		case "messages":
			f.msgs, ok = s.messages(f.msgs[:0])
			if ok {
				f.Messages = f.msgs
				if f.Messages == nil {
					f.Messages = []message{} // present and empty: not nil
				}
			}
		case "duplicate":
			f.Duplicate, ok = s.bool()
		case "max_seq":
			f.MaxSeq, ok = s.int()
		case "completed":
			if f.completed, ok = s.bool(); ok {
				f.Completed = &f.completed
			}
		case "code":
			var c []byte
			if c, ok = s.rawString(); ok {
				f.Code = string(c)
			}
		case "retry_after_ms":
			f.RetryAfterMS, ok = s.int()
		case "active":
			f.Active, ok = s.bool()
		default:
			ok = s.skip()
		}
		return ok
	})
	if !ok {
		return false
	}
	s.ws()
	return s.i == len(s.b)
}
