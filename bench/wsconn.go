package bench

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// The load generator shares the machine with the server, so what it spends
// per message is taken from the server. Some costs of coder/websocket's
// client are avoided here without touching the library or the protocol:
//
//   - It writes every message with its own write syscall (it flushes its
//     bufio.Writer into the net.Conn per message). A sender that has several
//     `send` frames ready corks the connection, writes them, and uncorks it:
//     the frames leave in one syscall, byte for byte as they would have one by
//     one. See corkConn.
//   - It reads through a 4 KiB bufio.Reader: corkConn.Read reads more at once.
//   - Read returns a fresh io.ReadAll buffer per message: readMessage reads
//     into the session's buffer, reused from frame to frame.
//   - Every Read and Write given a context that can be cancelled arms and
//     disarms a context.AfterFunc. The bench calls the library with a context
//     that is never cancelled and closes the connection once when the run's
//     context ends (newWSConn).

// wsConn is one WebSocket connection of a session.
type wsConn struct {
	c         *websocket.Conn
	cork      *corkConn   // nil: writes are not corked
	closed    atomic.Bool // closed on purpose: a read error is not a disconnect
	stopWatch func() bool
}

// libCtx is the context of every call into coder/websocket once connected:
// it is never cancelled, so the library arms no timer per read or write.
// The connection ends when its session's context does (newWSConn).
var libCtx = context.Background()

func newWSConn(ctx context.Context, c *websocket.Conn, cc *corkConn) *wsConn {
	wc := &wsConn{c: c, cork: cc}
	wc.stopWatch = context.AfterFunc(ctx, func() { c.CloseNow() })
	return wc
}

func (wc *wsConn) write(b []byte) error {
	return wc.c.Write(libCtx, websocket.MessageText, b)
}

// writeFrames writes the frames buf[0:ends[0]], buf[ends[0]:ends[1]], ...,
// one WebSocket message each, in one syscall if the connection can be corked.
func (wc *wsConn) writeFrames(buf []byte, ends []int) error {
	corked := wc.cork != nil && len(ends) > 1
	if corked {
		wc.cork.cork()
	}
	var err error
	start := 0
	for _, end := range ends {
		if err = wc.write(buf[start:end]); err != nil {
			break
		}
		start = end
	}
	if corked {
		if uerr := wc.cork.uncork(); err == nil {
			err = uerr
		}
	}
	return err
}

// readMessage reads the next data message, appending it to buf (the
// reader's buffer, reused from frame to frame instead of io.ReadAll's fresh
// one per frame).
func (wc *wsConn) readMessage(buf []byte) ([]byte, error) {
	_, r, err := wc.c.Reader(libCtx)
	if err != nil {
		return buf, err
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// corkConn is the net.Conn under a WebSocket. While corked, writes are
// buffered; uncork writes the buffer out in one syscall. The library
// serialises frames itself (a frame's header, payload and flush happen under
// its write lock), so buffered bytes are whole frames in wire order, whichever
// goroutine wrote them (a sender's frames, an ack, a pong written by the
// reading goroutine). mu keeps the buffer and the socket writes in that order:
// a Write that arrives during the flush waits for it.
type corkConn struct {
	net.Conn

	// Reads go through rbuf: see Read.
	rbuf []byte
	r    int // rbuf[r:] is not read yet

	mu     sync.Mutex
	corked int    // nested corks; the last uncork flushes
	buf    []byte // written while corked, not yet on the socket
	err    error  // a failed flush: later writes fail too (the socket is broken)
}

// readBufSize is what one read syscall may bring. The library reads through
// a 4 KiB bufio.Reader, about two batch frames; under load more than that is
// often waiting in the socket, and one syscall for all of it instead of one
// per 4 KiB is much of what reading costs.
const readBufSize = 32 << 10

// Read serves the library's bufio.Reader from rbuf, refilled by one read of
// up to readBufSize. A connection gets rbuf only once a read has filled the
// caller's buffer (more was probably waiting): idle sessions do not hold one.
// Only the connection's reading goroutine calls Read.
func (c *corkConn) Read(p []byte) (int, error) {
	if c.r == len(c.rbuf) {
		if c.rbuf == nil || len(p) >= cap(c.rbuf) {
			n, err := c.Conn.Read(p)
			if n == len(p) && c.rbuf == nil {
				c.rbuf = make([]byte, 0, readBufSize)
			}
			return n, err
		}
		n, err := c.Conn.Read(c.rbuf[:cap(c.rbuf)])
		c.rbuf, c.r = c.rbuf[:n], 0
		if n == 0 {
			return 0, err
		}
		// An error that came with data is returned by the next call.
	}
	n := copy(p, c.rbuf[c.r:])
	c.r += n
	return n, nil
}

func (c *corkConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, c.err
	}
	if c.corked > 0 {
		c.buf = append(c.buf, p...)
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *corkConn) cork() {
	c.mu.Lock()
	c.corked++
	c.mu.Unlock()
}

// uncork ends one cork; the last one writes out what was buffered. Its error
// is that of the socket write, which may have carried other goroutines'
// frames as well: the connection is then broken and its reader reconnects.
func (c *corkConn) uncork() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.corked--
	if c.corked > 0 || len(c.buf) == 0 || c.err != nil {
		return c.err
	}
	_, err := c.Conn.Write(c.buf)
	if err != nil {
		c.err = err
	}
	if cap(c.buf) > 64<<10 {
		c.buf = nil // a rare big burst: do not keep its buffer per session
	} else {
		c.buf = c.buf[:0]
	}
	return err
}

// newWSTransport is the transport WebSocket handshakes go through: it dials
// corkConns. Upgraded connections are never returned to a pool, so keep-alives
// are off: a dialed connection only ever serves the handshake it was dialed for.
func newWSTransport() *http.Transport {
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:             nil, // as the API client: never a proxy from the environment
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &corkConn{Conn: c}, nil
		},
	}
}

// traceConn returns ctx with an httptrace hook that stores in *cc the
// corkConn the handshake ran on (under TLS, the one beneath the tls.Conn). It
// stays nil if the connection is something else: writes are then not corked.
func traceConn(ctx context.Context, cc **corkConn) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) {
			conn := info.Conn
			if tc, ok := conn.(interface{ NetConn() net.Conn }); ok {
				conn = tc.NetConn()
			}
			*cc, _ = conn.(*corkConn)
		},
	})
}
