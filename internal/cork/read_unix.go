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

// readChunk waits until the socket is readable and reads what it holds in
// one system call. The first attempt, which usually finds nothing (EAGAIN)
// on a connection that waits for its next frame, reads into p, the
// caller's buffer; once the socket has woken the reader, it reads into a
// pooled chunk (c.chunk): a small one unless the last read filled its
// chunk (busy), a large one then, and a busy connection's first attempt
// takes a chunk too. It reports whether the bytes are in p or in c.chunk.
// A waiting connection holds no chunk.
//
// Reading into the caller's small buffer instead costs a second call for
// any frame larger than it (a 170-byte send through the 128-byte buffer of
// an idle session), on top of the EAGAIN that every wait costs.
func (c *Conn) readChunk(p []byte) (n int, inP bool, err error) {
	if c.readFn == nil {
		// Made once per connection: a closure per call would cost
		// allocations per frame.
		c.readFn = c.readOnce
	}
	c.rp, c.tries = p, 0
	err = c.raw.Read(c.readFn)
	n, inP = c.rn, c.chunk == nil
	errno := c.rerrno
	c.rp = nil
	switch {
	case err != nil: // closed, or past the read deadline
		n = 0
	case errno != 0:
		n, err = 0, os.NewSyscallError("read", errno)
	case n == 0:
		err = io.EOF
	}
	if n == 0 && c.chunk != nil {
		c.releaseChunk()
	}
	return n, inP, err
}

// readOnce is readChunk's attempt on the socket's descriptor; false means
// wait until it is readable.
func (c *Conn) readOnce(fd uintptr) bool {
	buf := c.rp
	if c.tries > 0 || c.busy {
		if c.chunk == nil {
			if c.busy {
				c.chunk = chunks.Get().(*[]byte)
			} else {
				c.chunk = smallChunks.Get().(*[]byte)
			}
		}
		buf = *c.chunk
	}
	c.tries++
	for {
		n, err := syscall.Read(int(fd), buf)
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
		if c.chunk != nil {
			c.releaseChunk()
		}
		return false
	}
	return true
}
