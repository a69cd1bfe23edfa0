package server

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// wire is a session's TCP connection under the WebSocket library. While it
// is corked, writes are gathered in memory, so that the frames of one
// drained run leave in one write system call instead of one each: under
// load the calls, not the bytes, are what costs.
type wire struct {
	net.Conn
	// mu serializes every write to the socket, so a frame that the library
	// writes from another goroutine (a pong, a close) while the session's
	// writer flushes can never land inside the flushed bytes.
	mu     sync.Mutex
	corked bool
	buf    *[]byte

	// Read state, used by the library's single reader goroutine only.
	busy  bool    // the last read filled its buffer: more is likely waiting
	chunk *[]byte // a pooled read-ahead buffer while busy
	ahead []byte  // its unread part
}

// wireFlushAt bounds what a cork gathers before it is written anyway.
const wireFlushAt = 64 << 10

// wireBufs holds gather buffers between flushes, so that an idle session
// keeps none.
var wireBufs = sync.Pool{New: func() any { b := make([]byte, 0, 8<<10); return &b }}

// wireChunk is what a busy session reads per system call.
const wireChunk = 16 << 10

var wireChunks = sync.Pool{New: func() any { b := make([]byte, wireChunk); return &b }}

// Read serves the library's small buffered reader. A waiting session
// blocks in a read into that small buffer and holds nothing else; once a
// read fills it, more is probably queued in the socket, and reads go
// through a pooled chunk, handed back as soon as it is drained.
func (w *wire) Read(p []byte) (int, error) {
	if len(w.ahead) > 0 {
		n := copy(p, w.ahead)
		w.ahead = w.ahead[n:]
		if len(w.ahead) == 0 {
			w.releaseChunk()
		}
		return n, nil
	}
	if !w.busy || len(p) >= wireChunk {
		n, err := w.Conn.Read(p)
		w.busy = n == len(p)
		return n, err
	}
	w.chunk = wireChunks.Get().(*[]byte)
	n, err := w.Conn.Read(*w.chunk)
	w.busy = n == len(*w.chunk)
	c := copy(p, (*w.chunk)[:n])
	w.ahead = (*w.chunk)[c:n]
	if len(w.ahead) == 0 {
		w.releaseChunk()
	}
	return c, err
}

func (w *wire) releaseChunk() {
	wireChunks.Put(w.chunk)
	w.chunk, w.ahead = nil, nil
}

func (w *wire) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.corked {
		return w.Conn.Write(p)
	}
	*w.buf = append(*w.buf, p...)
	if len(*w.buf) >= wireFlushAt {
		if err := w.flushLocked(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// cork gathers the following writes until uncork. The socket's write
// deadline is set for the whole cork, flushes of a large one included, so
// that the frames can be handed over without a timeout of their own.
func (w *wire) cork(timeout time.Duration) {
	w.mu.Lock()
	w.corked = true
	if w.buf == nil {
		w.buf = wireBufs.Get().(*[]byte)
	}
	w.Conn.SetWriteDeadline(time.Now().Add(timeout))
	w.mu.Unlock()
}

// uncork writes what was gathered, by the deadline cork set.
func (w *wire) uncork() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.corked = false
	if w.buf == nil {
		w.Conn.SetWriteDeadline(time.Time{})
		return nil
	}
	err := w.flushLocked()
	// Later writes (pongs, close frames) are bounded by the library's own
	// context timeouts; a stale deadline would fail them.
	w.Conn.SetWriteDeadline(time.Time{})
	if cap(*w.buf) <= wireFlushAt*2 {
		*w.buf = (*w.buf)[:0]
		wireBufs.Put(w.buf)
	}
	w.buf = nil
	return err
}

func (w *wire) flushLocked() error {
	b := *w.buf
	*w.buf = b[:0]
	for len(b) > 0 {
		n, err := w.Conn.Write(b)
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// wireWriter hands the WebSocket library a wire instead of the bare
// connection when it hijacks the HTTP connection. It also trades the HTTP
// server's 4 KiB buffers for smaller ones: writes are gathered by the wire
// and client frames are small, while every idle session would keep the
// larger buffers for its whole life.
type wireWriter struct {
	http.ResponseWriter
	wire *wire
}

// Buffer sizes of a hijacked connection, kept by every session for its
// whole life. The read buffer holds a frame header or a small frame, the
// wire reads ahead in larger chunks when frames pour in; the write buffer
// holds frame headers and control frames (a larger one takes two writes to
// the wire, which keeps them in order), larger writes go straight through.
const (
	wireReadBuffer  = 128
	wireWriteBuffer = 128
)

func (ww *wireWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(ww.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	ww.wire = &wire{Conn: conn}
	return ww.wire, bufio.NewReadWriter(smallReader(brw.Reader, ww.wire), bufio.NewWriterSize(ww.wire, wireWriteBuffer)), nil
}

// smallReader returns a reader of wireReadBuffer bytes that goes on where
// old, the HTTP server's, stopped. Bytes a client sent right behind its
// handshake may be in old's buffer already: they are moved into the new
// buffer, where the WebSocket library looks for them (Buffered, Peek).
func smallReader(old *bufio.Reader, w *wire) *bufio.Reader {
	n := old.Buffered()
	if n == 0 {
		return bufio.NewReaderSize(w, wireReadBuffer)
	}
	if n > wireReadBuffer {
		return old
	}
	pending, _ := old.Peek(n)
	r := bufio.NewReaderSize(io.MultiReader(bytes.NewReader(bytes.Clone(pending)), w), wireReadBuffer)
	if _, err := r.Peek(n); err != nil {
		return old
	}
	return r
}
