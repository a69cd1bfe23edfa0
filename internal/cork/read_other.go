//go:build !unix

package cork

import (
	"net"
	"syscall"
)

func rawConnOf(net.Conn) syscall.RawConn { return nil }

func (c *Conn) readChunk() (int, error) { panic("cork: no raw connection") }
