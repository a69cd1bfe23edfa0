//go:build unix

package cork

import (
	"io"
	"net"
	"os"
	"syscall"
)

// rawConnOf is c's file descriptor access, nil when c has none (TLS, pipes,
// test doubles): Read then takes the portable path.
func rawConnOf(c net.Conn) syscall.RawConn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// readChunk waits until the socket is readable and then reads what it
// holds into a pooled chunk in one system call (c.chunk, n bytes): a small
// one unless the last read filled its chunk (busy), a large one then. A
// waiting connection holds no chunk: it is taken for each attempt and
// given back when the socket has nothing yet (EAGAIN).
//
// Reading into the caller's small buffer instead costs a second call for
// any frame larger than it (a 170-byte send through the 128-byte buffer of
// an idle session), on top of the EAGAIN that every wait costs.
func (c *Conn) readChunk() (int, error) {
	if c.readFn == nil {
		// Made once per connection: a closure per call would cost
		// allocations per frame.
		c.readFn = c.readOnce
	}
	err := c.raw.Read(c.readFn)
	n, errno := c.rn, c.rerrno
	var rerr error
	switch {
	case err != nil: // closed, or past the read deadline
		n, rerr = 0, err
	case errno != 0:
		n, rerr = 0, os.NewSyscallError("read", errno)
	case n == 0:
		rerr = io.EOF
	}
	if n == 0 && c.chunk != nil {
		c.releaseChunk()
	}
	return n, rerr
}

// readOnce is readChunk's attempt on the socket's descriptor; false means
// wait until it is readable.
func (c *Conn) readOnce(fd uintptr) bool {
	if c.chunk == nil {
		if c.busy {
			c.chunk = chunks.Get().(*[]byte)
		} else {
			c.chunk = smallChunks.Get().(*[]byte)
		}
	}
	for {
		n, err := syscall.Read(int(fd), *c.chunk)
		c.rn, c.rerrno = n, 0
		if errno, ok := err.(syscall.Errno); ok {
			c.rn, c.rerrno = 0, errno
		} else if err != nil {
			c.rn, c.rerrno = 0, syscall.EIO
		}
		if c.rerrno != syscall.EINTR {
			break
		}
	}
	if c.rerrno == syscall.EAGAIN {
		c.releaseChunk()
		return false
	}
	return true
}
