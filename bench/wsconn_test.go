package bench

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"
)

// recordConn is a net.Conn that records each Write call.
type recordConn struct {
	net.Conn
	mu     sync.Mutex
	writes [][]byte
	reads  [][]byte // what the socket holds at each read, then io.EOF

	readCalls int
}

func (c *recordConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes = append(c.writes, bytes.Clone(p))
	return len(p), nil
}

// Read serves what is left of reads[0], as much as fits, like a socket
// holding that much.
func (c *recordConn) Read(p []byte) (int, error) {
	if len(c.reads) == 0 {
		return 0, io.EOF
	}
	c.readCalls++
	n := copy(p, c.reads[0])
	if c.reads[0] = c.reads[0][n:]; len(c.reads[0]) == 0 {
		c.reads = c.reads[1:]
	}
	return n, nil
}

func TestCorkConnWritesOnceInOrder(t *testing.T) {
	rec := &recordConn{}
	c := &corkConn{Conn: rec}
	c.Write([]byte("a"))
	c.cork()
	c.Write([]byte("b"))
	c.cork() // another goroutine's cork: the last uncork flushes
	c.Write([]byte("c"))
	if err := c.uncork(); err != nil {
		t.Fatal(err)
	}
	if len(rec.writes) != 1 {
		t.Fatalf("flushed before the last uncork: %q", rec.writes)
	}
	c.Write([]byte("d"))
	if err := c.uncork(); err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("e"))
	want := [][]byte{[]byte("a"), []byte("bcd"), []byte("e")}
	if len(rec.writes) != len(want) {
		t.Fatalf("writes %q, want %q", rec.writes, want)
	}
	for i := range want {
		if !bytes.Equal(rec.writes[i], want[i]) {
			t.Fatalf("writes %q, want %q", rec.writes, want)
		}
	}
}

func TestCorkConnConcurrentWritesStayWhole(t *testing.T) {
	rec := &recordConn{}
	c := &corkConn{Conn: rec}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				c.cork()
				c.Write([]byte{'<', byte('0' + g), '>'})
				c.uncork()
				c.Write([]byte{'(', byte('0' + g), ')'})
			}
		}()
	}
	wg.Wait()
	all := bytes.Join(rec.writes, nil)
	if len(all) != 4*200*6 {
		t.Fatalf("%d bytes written, want %d", len(all), 4*200*6)
	}
	for i := 0; i < len(all); i += 3 {
		if w := all[i : i+3]; !(w[0] == '<' && w[2] == '>' || w[0] == '(' && w[2] == ')') {
			t.Fatalf("a write split or interleaved at %d: %q", i, all[i:min(len(all), i+12)])
		}
	}
}

func TestCorkConnReadBuffers(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789"), 10000)
	rec := &recordConn{reads: [][]byte{[]byte("hi"), []byte("hello world"), big, []byte("!")}}
	c := &corkConn{Conn: rec}
	var got []byte
	p := make([]byte, 4)
	for {
		n, err := c.Read(p)
		got = append(got, p[:n]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	want := "hihello world" + string(big) + "!"
	if string(got) != want {
		t.Errorf("read %d bytes, want %d (or not the same)", len(got), len(want))
	}
	// "hi" and "hell" directly, then through the buffer: "o world", and
	// big in pieces of readBufSize, and "!".
	if wantCalls := 2 + 1 + (len(big)+readBufSize-1)/readBufSize + 1; rec.readCalls != wantCalls {
		t.Errorf("%d reads from the socket, want %d", rec.readCalls, wantCalls)
	}
}

func TestParseReq(t *testing.T) {
	s := &session{cmidPrefix: "12-"}
	for in, want := range map[string]int{"12-1": 1, "12-345": 345, "12-0": -1, "12-01": -1, "12-": -1, "12--1": -1,
		"1-5": -1, "112-5": -1, "12-5x": -1, "sync:0": -1, "": -1} {
		n, ok := s.parseReq([]byte(in))
		if !ok {
			n = -1
		}
		if n != want {
			t.Errorf("parseReq(%q) = %d, %v; want %d", in, n, ok, want)
		}
	}
}

func TestParseInt(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "7": 7, "-3": -3, "9223372036854775799": 9223372036854775799} {
		if n, ok := parseInt([]byte(in)); !ok || n != want {
			t.Errorf("parseInt(%q) = %d, %v; want %d", in, n, ok, want)
		}
	}
	for _, in := range []string{"", "-", "01", "1.5", "1e3", "+1", "99999999999999999999", "1-"} {
		if n, ok := parseInt([]byte(in)); ok {
			t.Errorf("parseInt(%q) = %d, ok", in, n)
		}
	}
}
