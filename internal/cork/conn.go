// Package cork wraps the TCP connection under a WebSocket library (server
// and load generator alike) so that the frames of a burst leave in one
// system call and frames pouring in are read in large chunks, while an idle
// connection holds no buffer.
package cork

import (
	"net"
	"sync"
	"syscall"
	"time"
)

// Conn is a net.Conn whose writes can be corked: gathered in memory until
// the last Uncork writes them in one call. Under load the calls, not the
// bytes, are what costs.
//
// WebSocket libraries write each frame (header, payload, flush) under a
// lock of their own, so whatever goroutine writes (a sender, a pong, a
// close), the gathered bytes are whole frames in wire order; mu keeps the
// buffer and the socket writes in that same order.
type Conn struct {
	net.Conn

	mu    sync.Mutex
	corks int       // nested corks; the last Uncork flushes
	armed time.Time // the socket's write deadline, zero for none
	buf   *[]byte   // gathered while corked, from bufs
	err   error     // a failed flush: the socket is broken, later writes fail too

	// Read state, used by the connection's single reading goroutine.
	raw   syscall.RawConn // the socket's descriptor, nil when not a plain socket (read_unix.go)
	busy  bool            // the last read filled its buffer: more is likely waiting
	chunk *[]byte         // a read-ahead buffer from chunks while busy

	// readChunk's callback and its outcome (read_unix.go).
	readFn func(fd uintptr) bool
	rp     []byte // the caller's buffer during readChunk
	tries  int
	rn     int
	rerrno syscall.Errno
	ahead  []byte // its unread part
}

// New wraps c.
func New(c net.Conn) *Conn { return &Conn{Conn: c, raw: rawConnOf(c)} }

const (
	// FlushAt bounds what a cork gathers before it is written anyway.
	FlushAt = 64 << 10
	// ChunkSize is what a busy connection reads per system call.
	ChunkSize = 32 << 10
)

// Buffers live in pools between uses, so that idle connections keep none.
var (
	bufs   = sync.Pool{New: func() any { b := make([]byte, 0, 8<<10); return &b }}
	chunks = sync.Pool{New: func() any { b := make([]byte, ChunkSize); return &b }}
	// smallChunks serve a plain socket's reads until one fills a chunk
	// (read_unix.go): a frame that wakes an idle session is small, and
	// pooled buffers are dropped at every collection, so the size of what
	// is taken per frame is what the collector sees.
	smallChunks = sync.Pool{New: func() any { b := make([]byte, smallChunkSize); return &b }}
)

const smallChunkSize = 4 << 10

// Cork gathers the following writes until the matching Uncork; corks nest.
// A non-zero deadline, taken from the outermost Cork, bounds the socket
// writes made while corked (a large cork flushes at FlushAt) and by the
// last Uncork, so the frames themselves can be written without timeouts of
// their own.
func (c *Conn) Cork(deadline time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.corks++
	if c.corks > 1 {
		return
	}
	c.buf = bufs.Get().(*[]byte)
	c.setDeadlineLocked(deadline)
}

// setDeadlineLocked bounds the writes that follow by deadline (none when
// zero). Setting a socket's deadline costs a timer update, so a deadline
// already armed is kept when it falls short of the new one by at most an
// eighth of the time left: a session's writer, which corks every round
// with the same timeout, re-arms it a few times per timeout instead of
// twice per round.
func (c *Conn) setDeadlineLocked(deadline time.Time) {
	if deadline.IsZero() {
		if !c.armed.IsZero() {
			c.Conn.SetWriteDeadline(time.Time{})
			c.armed = time.Time{}
		}
		return
	}
	if !c.armed.IsZero() && !deadline.Before(c.armed) && deadline.Sub(c.armed) <= time.Until(deadline)/8 {
		return
	}
	c.Conn.SetWriteDeadline(deadline)
	c.armed = deadline
}

// Uncork ends one Cork; the last one writes out what was gathered. Its
// error is that of the socket write, which may have carried other
// goroutines' frames as well: the connection is broken then.
func (c *Conn) Uncork() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.corks--
	if c.corks > 0 {
		return c.err
	}
	if c.err == nil {
		c.flushLocked()
	}
	if cap(*c.buf) <= 2*FlushAt {
		*c.buf = (*c.buf)[:0]
		bufs.Put(c.buf)
	}
	c.buf = nil
	return c.err
}

func (c *Conn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, c.err
	}
	if c.corks == 0 {
		// Uncorked writes (pongs, close frames) have timeouts of their
		// own; the deadline a cork left armed must not fail them.
		c.setDeadlineLocked(time.Time{})
		return c.Conn.Write(p)
	}
	*c.buf = append(*c.buf, p...)
	if len(*c.buf) >= FlushAt {
		if err := c.flushLocked(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

func (c *Conn) flushLocked() error {
	b := *c.buf
	*c.buf = b[:0]
	if len(b) == 0 {
		return nil
	}
	if _, err := c.Conn.Write(b); err != nil {
		c.err = err
	}
	return c.err
}

// Read serves the library's buffered reader. On a plain socket every read
// goes through a pooled chunk, taken only once the socket is readable
// (readChunk), so a frame larger than the reader's small buffer costs one
// system call and a waiting connection holds no chunk. Elsewhere a waiting
// connection blocks in a read into that reader's buffer; once a read fills
// it, more is probably queued, and reads go through a chunk. Either way the
// chunk is handed back as soon as it is drained.
func (c *Conn) Read(p []byte) (int, error) {
	if len(c.ahead) > 0 {
		n := copy(p, c.ahead)
		c.ahead = c.ahead[n:]
		if len(c.ahead) == 0 {
			c.releaseChunk()
		}
		return n, nil
	}
	if c.raw != nil && len(p) < ChunkSize {
		n, inP, err := c.readChunk(p)
		if n == 0 || inP {
			c.busy = n == len(p)
			return n, err
		}
		c.busy = n == len(*c.chunk)
		m := copy(p, (*c.chunk)[:n])
		c.ahead = (*c.chunk)[m:n]
		if len(c.ahead) == 0 {
			c.releaseChunk()
		}
		return m, err
	}
	if !c.busy || len(p) >= ChunkSize {
		n, err := c.Conn.Read(p)
		c.busy = n == len(p)
		return n, err
	}
	c.chunk = chunks.Get().(*[]byte)
	n, err := c.Conn.Read(*c.chunk)
	c.busy = n == len(*c.chunk)
	m := copy(p, (*c.chunk)[:n])
	c.ahead = (*c.chunk)[m:n]
	if len(c.ahead) == 0 {
		c.releaseChunk()
	}
	return m, err
}

func (c *Conn) releaseChunk() {
	if len(*c.chunk) == smallChunkSize {
		smallChunks.Put(c.chunk)
	} else {
		chunks.Put(c.chunk)
	}
	c.chunk, c.ahead = nil, nil
}
