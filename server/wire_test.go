package server

import (
	"bufio"
	"io"
	"net"
	"testing"

	"github.com/imserver/imserver/internal/cork"
)

// scriptConn answers reads from a script of chunks, each as one read.
type scriptConn struct {
	net.Conn
	chunks [][]byte
}

func (c *scriptConn) Read(p []byte) (int, error) {
	if len(c.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.chunks[0])
	c.chunks[0] = c.chunks[0][n:]
	if len(c.chunks[0]) == 0 {
		c.chunks = c.chunks[1:]
	}
	return n, nil
}

// Bytes already buffered by the HTTP server move into the small reader.
func TestSmallReaderKeepsBufferedBytes(t *testing.T) {
	sc := &scriptConn{chunks: [][]byte{[]byte("early"), []byte(" and later")}}
	old := bufio.NewReader(sc)
	if _, err := old.Peek(5); err != nil {
		t.Fatal(err)
	}
	w := cork.New(sc)
	r := smallReader(old, w)
	if r == old {
		t.Fatal("kept the HTTP server's buffer")
	}
	if got := r.Buffered(); got != 5 {
		t.Fatalf("buffered %d bytes, want 5", got)
	}
	got, _ := io.ReadAll(r)
	if string(got) != "early and later" {
		t.Fatalf("read %q", got)
	}
}
