//go:build !unix

package cork

import (
	"net"
	"syscall"
)

func rawConnOf(net.Conn) syscall.RawConn { return nil }

func (c *Conn) readChunk([]byte) (int, bool, error) { panic("cork: no raw connection") }
