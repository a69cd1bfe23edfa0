package bench

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/imserver/imserver/internal/cork"
)

// The load generator shares the machine with the server, so what it spends
// per message is taken from the server. Some costs of coder/websocket's
// client are avoided here without touching the library or the protocol:
//
//   - It writes every message with its own write syscall (it flushes its
//     bufio.Writer into the net.Conn per message). A sender that has several
//     `send` frames ready corks the connection, writes them, and uncorks it:
//     the frames leave in one syscall, byte for byte as they would have one by
//     one. See cork.Conn.
//   - It reads through a 4 KiB bufio.Reader: cork.Conn.Read reads more at once.
//   - Read returns a fresh io.ReadAll buffer per message: readMessage reads
//     into the session's buffer, reused from frame to frame.
//   - Every Read and Write given a context that can be cancelled arms and
//     disarms a context.AfterFunc. The bench calls the library with a context
//     that is never cancelled and closes the connection once when the run's
//     context ends (newWSConn).

// wsConn is one WebSocket connection of a session.
type wsConn struct {
	c         *websocket.Conn
	cork      *cork.Conn  // nil: writes are not corked
	closed    atomic.Bool // closed on purpose: a read error is not a disconnect
	stopWatch func() bool
}

// libCtx is the context of every call into coder/websocket once connected:
// it is never cancelled, so the library arms no timer per read or write.
// The connection ends when its session's context does (newWSConn).
var libCtx = context.Background()

func newWSConn(ctx context.Context, c *websocket.Conn, cc *cork.Conn) *wsConn {
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
		wc.cork.Cork(time.Time{})
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
		if uerr := wc.cork.Uncork(); err == nil {
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

// newWSTransport is the transport WebSocket handshakes go through: it dials
// cork.Conns. Upgraded connections are never returned to a pool, so keep-alives
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
			return cork.New(c), nil
		},
	}
}

// traceConn returns ctx with an httptrace hook that stores in *cc the
// cork.Conn the handshake ran on (under TLS, the one beneath the tls.Conn). It
// stays nil if the connection is something else: writes are then not corked.
func traceConn(ctx context.Context, cc **cork.Conn) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) {
			conn := info.Conn
			if tc, ok := conn.(interface{ NetConn() net.Conn }); ok {
				conn = tc.NetConn()
			}
			*cc, _ = conn.(*cork.Conn)
		},
	})
}
