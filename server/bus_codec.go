package server

import (
	"encoding/binary"
	"encoding/json"
	"errors"

	"github.com/imserver/imserver/chat"
)

// The bus carries events in a binary frame of their own, one PUBLISH per
// DeliverAll (a commit's fan-out), instead of a JSON document per event:
// with several nodes every node reads every event of every other node, and
// decoding them was a third of a node's CPU. A receiver reads an entry's
// recipients and (conversation, seq) first and only builds a frame for a
// message whose recipients have sessions here; the message itself travels
// as its wire JSON, encoded once by the node that committed it and handed
// to the sessions as it is.
//
// Layout (integers are uvarints unless said otherwise, strings and byte
// strings a uvarint length and the bytes):
//
//	busMagic, 8-byte big-endian publish seq (stamped by publishLoop), node,
//	then entries to the end:
//	  'm' users(count, strings) conv seq(varint) origin except message-JSON
//	  'j' users(count, strings) wireEvent-JSON          (any other event)
//
// Control messages (roster, logout) stay JSON documents, as do the events
// of a node that predates this layout: receivers read both. A node of an
// older version cannot read this layout and logs it as a bad message: in a
// rolling upgrade its clients catch up by sync until it is replaced.
const busMagic = "\x00imb1"

// busSeqAt is where the publish seq sits in a binary bus message.
const busSeqAt = len(busMagic)

// busMaxBytes ends a binary bus message: a bigger commit's fan-out goes out
// as several, so that no single PUBLISH sits long in a subscriber's output
// buffer.
const busMaxBytes = 256 << 10

// busEntry is one event of a binary bus message, as read: strings are
// slices of the payload.
type busEntry struct {
	users  []string
	event  bool   // a JSON wireEvent (body) instead of a message
	conv   string // message
	seq    int64  // message
	origin string // message
	except string // message
	body   string // the message's wire JSON, or the wireEvent's JSON
}

// busEncoder builds binary bus messages.
type busEncoder struct {
	node string
	buf  []byte
	n    int // entries in buf
	out  [][]byte
}

func (e *busEncoder) start() {
	e.buf = make([]byte, 0, 4096)
	e.buf = append(e.buf, busMagic...)
	e.buf = append(e.buf, 0, 0, 0, 0, 0, 0, 0, 0)
	e.buf = appendBusString(e.buf, e.node)
	e.n = 0
}

// entry starts an entry of kind for users, closing the current message
// first if it is full.
func (e *busEncoder) entry(kind byte, users []string) {
	if e.buf == nil || len(e.buf) >= busMaxBytes {
		e.flush()
		e.start()
	}
	e.n++
	e.buf = append(e.buf, kind)
	e.buf = binary.AppendUvarint(e.buf, uint64(len(users)))
	for _, u := range users {
		e.buf = appendBusString(e.buf, u)
	}
}

// message adds a message event; msg is its wire JSON.
func (e *busEncoder) message(users []string, ev *chat.Event, msg []byte) {
	e.entry('m', users)
	e.buf = appendBusString(e.buf, ev.Conv)
	e.buf = binary.AppendVarint(e.buf, ev.Message.Seq)
	e.buf = appendBusString(e.buf, ev.Message.Origin)
	e.buf = appendBusString(e.buf, ev.ExceptSession)
	e.buf = binary.AppendUvarint(e.buf, uint64(len(msg)))
	e.buf = append(e.buf, msg...)
}

// event adds any other event as a JSON wireEvent.
func (e *busEncoder) event(users []string, ev *chat.Event) error {
	w := &wireEvent{Event: *ev}
	if ev.Message != nil {
		w.Origins = []string{ev.Message.Origin}
	}
	for _, m := range ev.Messages {
		w.Origins = append(w.Origins, m.Origin)
	}
	data, err := json.Marshal(w)
	if err != nil {
		return err
	}
	e.entry('j', users)
	e.buf = binary.AppendUvarint(e.buf, uint64(len(data)))
	e.buf = append(e.buf, data...)
	return nil
}

// flush closes the message being built, if it holds anything.
func (e *busEncoder) flush() {
	if e.buf == nil || e.n == 0 {
		return
	}
	e.out = append(e.out, e.buf)
	e.buf, e.n = nil, 0
}

// messages returns the finished bus messages.
func (e *busEncoder) messages() [][]byte {
	e.flush()
	return e.out
}

func appendBusString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// stampBinary puts seq into a binary bus message.
func stampBinary(data []byte, seq uint64) []byte {
	binary.BigEndian.PutUint64(data[busSeqAt:], seq)
	return data
}

var errBusShort = errors.New("bus: truncated binary message")

// busReader reads a binary bus message without copying: every string it
// returns is a slice of the payload.
type busReader struct {
	p   string
	err error
}

func (r *busReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	var x uint64
	var s uint
	for i := 0; i < len(r.p) && i < binary.MaxVarintLen64; i++ {
		c := r.p[i]
		if c < 0x80 {
			r.p = r.p[i+1:]
			return x | uint64(c)<<s
		}
		x |= uint64(c&0x7f) << s
		s += 7
	}
	r.err = errBusShort
	return 0
}

func (r *busReader) varint() int64 {
	u := r.uvarint()
	x := int64(u >> 1)
	if u&1 != 0 {
		x = ^x
	}
	return x
}

func (r *busReader) str() string {
	n := r.uvarint()
	if r.err != nil {
		return ""
	}
	if n > uint64(len(r.p)) {
		r.err = errBusShort
		return ""
	}
	s := r.p[:n]
	r.p = r.p[n:]
	return s
}

func (r *busReader) byte() byte {
	if r.err != nil || len(r.p) == 0 {
		r.err = errBusShort
		return 0
	}
	c := r.p[0]
	r.p = r.p[1:]
	return c
}

// decodeBus reads a binary bus message's node, publish seq and entries,
// calling each for every entry in order; it stops at the first malformed
// byte.
func decodeBus(p string, head func(node string, seq uint64) bool, each func(*busEntry)) error {
	if len(p) < busSeqAt+8 || p[:len(busMagic)] != busMagic {
		return errBusShort
	}
	seq := binary.BigEndian.Uint64([]byte(p[busSeqAt : busSeqAt+8]))
	r := &busReader{p: p[busSeqAt+8:]}
	node := r.str()
	if r.err != nil {
		return r.err
	}
	if !head(node, seq) {
		return nil
	}
	var e busEntry
	for len(r.p) > 0 {
		kind := r.byte()
		nu := r.uvarint()
		if r.err == nil && nu > uint64(len(r.p)) {
			r.err = errBusShort // each user takes a byte at least
		}
		if r.err != nil {
			return r.err
		}
		e = busEntry{users: make([]string, nu)}
		for j := range e.users {
			e.users[j] = r.str()
		}
		switch kind {
		case 'm':
			e.conv = r.str()
			e.seq = r.varint()
			e.origin = r.str()
			e.except = r.str()
			e.body = r.str()
		case 'j':
			e.event = true
			e.body = r.str()
		default:
			return errors.New("bus: unknown entry kind")
		}
		if r.err != nil {
			return r.err
		}
		each(&e)
	}
	return nil
}
