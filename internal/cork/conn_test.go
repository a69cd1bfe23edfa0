package cork

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// recordConn is a net.Conn that keeps each Write call apart.
type recordConn struct {
	net.Conn
	mu     sync.Mutex
	writes [][]byte
}

func (c *recordConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes = append(c.writes, append([]byte(nil), p...))
	return len(p), nil
}

func (c *recordConn) SetWriteDeadline(time.Time) error { return nil }

func TestConnCorkGathersWrites(t *testing.T) {
	rc := &recordConn{}
	w := New(rc)
	w.Write([]byte("a"))
	w.Cork(time.Now().Add(time.Second))
	w.Write([]byte("bb"))
	w.Write([]byte("ccc"))
	if got := len(rc.writes); got != 1 {
		t.Fatalf("corked writes reached the socket: %d calls", got)
	}
	if err := w.Uncork(); err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("d"))
	want := []string{"a", "bbccc", "d"}
	if len(rc.writes) != len(want) {
		t.Fatalf("writes = %q, want %q", rc.writes, want)
	}
	for i := range want {
		if string(rc.writes[i]) != want[i] {
			t.Fatalf("writes = %q, want %q", rc.writes, want)
		}
	}
}

// A frame from another goroutine (the library's pong) lands whole, before
// or after a flush, never inside it. frameMu stands for the library's lock
// around the writes of one frame; cork and uncork are called outside it,
// as the session's writer does.
func TestConnConcurrentWritesStayWhole(t *testing.T) {
	rc := &recordConn{}
	w := New(rc)
	var frameMu sync.Mutex
	frame := func(parts ...string) {
		frameMu.Lock()
		defer frameMu.Unlock()
		for _, p := range parts {
			w.Write([]byte(p))
		}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 1000; i++ {
			frame("<po", "ng>")
		}
	}()
	for i := 0; i < 1000; i++ {
		w.Cork(time.Now().Add(time.Second))
		frame("[1", "2]")
		w.Uncork()
	}
	wg.Wait()
	all := bytes.Join(rc.writes, nil)
	rest := all
	for len(rest) > 0 {
		switch {
		case bytes.HasPrefix(rest, []byte("<pong>")):
			rest = rest[len("<pong>"):]
		case bytes.HasPrefix(rest, []byte("[12]")):
			rest = rest[len("[12]"):]
		default:
			t.Fatalf("interleaved bytes: %q", rest[:min(len(rest), 20)])
		}
	}
	if n := bytes.Count(all, []byte("<pong>")); n != 1000 {
		t.Fatalf("%d pongs, want 1000", n)
	}
}

func TestConnFlushesLargeCork(t *testing.T) {
	rc := &recordConn{}
	w := New(rc)
	w.Cork(time.Now().Add(time.Second))
	chunk := bytes.Repeat([]byte("x"), 1000)
	for i := 0; i < 100; i++ {
		w.Write(chunk)
	}
	if len(rc.writes) == 0 {
		t.Fatal("100 KB gathered without a write")
	}
	w.Uncork()
	if n := len(bytes.Join(rc.writes, nil)); n != 100*1000 {
		t.Fatalf("%d bytes written, want %d", n, 100*1000)
	}
}

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

// Reads go through a pooled chunk only after a read filled the caller's
// small buffer, and the bytes come out in order either way.
func TestConnReadsAheadWhenBusy(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789"), 3000)
	sc := &scriptConn{chunks: [][]byte{[]byte("small"), big, []byte("tail")}}
	w := New(sc)
	var got []byte
	p := make([]byte, 256)
	for {
		n, err := w.Read(p)
		got = append(got, p[:n]...)
		if n == 5 && w.chunk != nil {
			t.Fatal("a short read took a chunk")
		}
		if err != nil {
			break
		}
	}
	want := append(append([]byte("small"), big...), "tail"...)
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, want %d, in order", len(got), len(want))
	}
	if w.chunk != nil || w.ahead != nil {
		t.Fatal("chunk kept after draining")
	}
}

// Corks nest: another goroutine's cork keeps the gathered bytes until the
// last Uncork.
func TestConnCorksNest(t *testing.T) {
	rc := &recordConn{}
	c := New(rc)
	c.Write([]byte("a"))
	c.Cork(time.Time{})
	c.Write([]byte("b"))
	c.Cork(time.Time{})
	c.Write([]byte("c"))
	if err := c.Uncork(); err != nil {
		t.Fatal(err)
	}
	if len(rc.writes) != 1 {
		t.Fatalf("flushed before the last uncork: %q", rc.writes)
	}
	c.Write([]byte("d"))
	if err := c.Uncork(); err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("e"))
	want := []string{"a", "bcd", "e"}
	if len(rc.writes) != len(want) {
		t.Fatalf("writes %q, want %q", rc.writes, want)
	}
	for i := range want {
		if string(rc.writes[i]) != want[i] {
			t.Fatalf("writes %q, want %q", rc.writes, want)
		}
	}
}

// Goroutines that cork, write and uncork concurrently, and write uncorked
// in between, never split or interleave each other's writes.
func TestConnConcurrentCorksStayWhole(t *testing.T) {
	rc := &recordConn{}
	c := New(rc)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				c.Cork(time.Time{})
				c.Write([]byte{'<', byte('0' + g), '>'})
				c.Uncork()
				c.Write([]byte{'(', byte('0' + g), ')'})
			}
		}()
	}
	wg.Wait()
	all := bytes.Join(rc.writes, nil)
	if len(all) != 4*200*6 {
		t.Fatalf("%d bytes written, want %d", len(all), 4*200*6)
	}
	for i := 0; i < len(all); i += 3 {
		if w := all[i : i+3]; !(w[0] == '<' && w[2] == '>' || w[0] == '(' && w[2] == ')') {
			t.Fatalf("a write split or interleaved at %d: %q", i, all[i:min(len(all), i+12)])
		}
	}
}
