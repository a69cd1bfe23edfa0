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
	var n int
	var errno error
	err := c.raw.Read(func(fd uintptr) bool {
		if c.chunk == nil {
			if c.busy {
				c.chunk = chunks.Get().(*[]byte)
			} else {
				c.chunk = smallChunks.Get().(*[]byte)
			}
		}
		for {
			n, errno = syscall.Read(int(fd), *c.chunk)
			if errno != syscall.EINTR {
				break
			}
		}
		if errno == syscall.EAGAIN {
			c.releaseChunk()
			return false
		}
		return true
	})
	switch {
	case err != nil: // closed, or past the read deadline
		n, errno = 0, err
	case errno != nil:
		n, errno = 0, os.NewSyscallError("read", errno)
	case n == 0:
		errno = io.EOF
	}
	if n == 0 && c.chunk != nil {
		c.releaseChunk()
	}
	return n, errno
}
