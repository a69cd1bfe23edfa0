package bench

import (
	"encoding/json"
	"strconv"
)

// frame is a decoded server → client frame, reduced to what the bench reads.
type frame struct {
	Type         string
	Req          string
	Conv         string
	Message      *wireMessage // msg, sent
	Messages     []wireMessage
	Duplicate    bool
	MaxSeq       int64
	Completed    *bool
	Code         string
	RetryAfterMS int64
	Active       bool
}

// decodeFrame parses a frame. The load generator shares the machine with the
// server, and reflection-based decoding of every delivery was a third of its
// CPU; so the common shapes go through a small hand-written scanner, and
// anything it does not handle (escapes, floats where ints belong, other
// surprises) falls back to encoding/json, which also yields the error.
func decodeFrame(b []byte) (frame, error) {
	var f frame
	sc := scanner{b: b}
	if sc.frame(&f) {
		return f, nil
	}
	return decodeFrameJSON(b)
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

func decodeFrameJSON(b []byte) (frame, error) {
	var in inFrame
	if err := json.Unmarshal(b, &in); err != nil {
		return frame{}, err
	}
	f := frame{Type: in.Type, Req: in.Req, Conv: in.Conv, Messages: in.Messages, Duplicate: in.Duplicate,
		MaxSeq: in.MaxSeq, Completed: in.Completed, Code: in.Code, RetryAfterMS: in.RetryAfterMS, Active: in.Active}
	if len(in.Message) > 0 && in.Message[0] == '{' {
		var m wireMessage
		if err := json.Unmarshal(in.Message, &m); err != nil {
			return frame{}, err
		}
		f.Message = &m
	}
	return f, nil
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

// rawString returns the bytes of a string without escapes.
func (s *scanner) rawString() ([]byte, bool) {
	if !s.eat('"') {
		return nil, false
	}
	start := s.i
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

func (s *scanner) str() (string, bool) {
	b, ok := s.rawString()
	return string(b), ok
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
	n, err := strconv.ParseInt(string(s.b[start:s.i]), 10, 64)
	return n, err == nil
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

func (s *scanner) message(m *wireMessage) bool {
	return s.object(func(key []byte) bool {
		var ok bool
		switch string(key) {
		case "conv":
			m.Conv, ok = s.str()
		case "seq":
			m.Seq, ok = s.int()
		case "from":
			m.From, ok = s.str()
		case "client_msg_id":
			m.ClientMsgID, ok = s.str()
		case "body":
			m.Body, ok = s.str()
		default:
			ok = s.skip()
		}
		return ok
	})
}

func (s *scanner) frame(f *frame) bool {
	ok := s.object(func(key []byte) bool {
		var ok bool
		switch string(key) {
		case "type":
			f.Type, ok = s.str()
		case "req":
			if s.peek() != '"' {
				return s.skip()
			}
			f.Req, ok = s.str()
		case "conv":
			f.Conv, ok = s.str()
		case "message":
			if s.peek() != '{' {
				return s.skip() // an error frame's text
			}
			f.Message = new(wireMessage)
			ok = s.message(f.Message)
		case "messages":
			if !s.eat('[') {
				return false
			}
			f.Messages = []wireMessage{}
			if s.eat(']') {
				return true
			}
			for {
				f.Messages = append(f.Messages, wireMessage{})
				if !s.message(&f.Messages[len(f.Messages)-1]) {
					return false
				}
				if s.eat(']') {
					return true
				}
				if !s.eat(',') {
					return false
				}
			}
		case "duplicate":
			f.Duplicate, ok = s.bool()
		case "max_seq":
			f.MaxSeq, ok = s.int()
		case "completed":
			var c bool
			if c, ok = s.bool(); ok {
				f.Completed = &c
			}
		case "code":
			f.Code, ok = s.str()
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
