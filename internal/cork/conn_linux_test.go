package cork

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// readSyscalls is this process's read system calls so far (syscr).
func readSyscalls(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "syscr: "); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no syscr in /proc/self/io")
	return 0
}

// tcpPair is both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		accepted <- c
	}()
	client, err = net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// waitForParkedRead returns once a goroutine waits in a cork.Conn read for
// the socket to become readable.
func waitForParkedRead(t *testing.T) {
	t.Helper()
	buf := make([]byte, 1<<20)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(g, "[IO wait") && strings.Contains(g, "cork.(*Conn).Read(") {
				return
			}
		}
		runtime.Gosched()
	}
	t.Fatal("the reader never waited")
}

// A frame larger than the reader's 128-byte buffer (a 170-byte send) that
// arrives while the reader waits costs the EAGAIN of the wait and one read,
// not one read per buffer's worth after it.
func TestConnReadsAFrameInOneCall(t *testing.T) {
	peer, sc := tcpPair(t)
	c := New(sc)
	if c.raw == nil {
		t.Fatal("a TCP connection has no raw access")
	}
	frame := bytes.Repeat([]byte("f"), 170)
	const frames = 200
	done := make(chan error)
	go func() {
		r := bufio.NewReaderSize(c, 128)
		got := make([]byte, len(frame))
		for range frames {
			// As a WebSocket library does: the header through the
			// buffer (which fills it), then the payload.
			_, err := io.ReadFull(r, got[:6])
			if err == nil {
				_, err = io.ReadFull(r, got[6:])
			}
			if err == nil && !bytes.Equal(got, frame) {
				err = fmt.Errorf("read %q", got)
			}
			done <- err
		}
	}()
	before := readSyscalls(t)
	for range frames {
		waitForParkedRead(t)
		if _, err := peer.Write(frame); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	calls := readSyscalls(t) - before
	t.Logf("%d read calls for %d frames", calls, frames)
	// Two per frame (three through the buffer); a few more when a write
	// lands in two pieces or the runtime reads its poller's eventfd.
	if calls > frames*9/4 {
		t.Fatalf("%d read calls for %d frames of 170 bytes, want about two each", calls, frames)
	}
	if c.chunk != nil || c.ahead != nil {
		t.Fatal("chunk kept after draining")
	}
}

// A read waits for data (holding no chunk), sees the read deadline, and
// reports the end of the stream.
func TestConnRawReadWaitsDeadlineAndEOF(t *testing.T) {
	peer, sc := tcpPair(t)
	c := New(sc)
	p := make([]byte, 128)
	sc.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := c.Read(p); !os.IsTimeout(err) {
		t.Fatalf("read past the deadline: %v, want a timeout", err)
	}
	if c.chunk != nil {
		t.Fatal("a waiting read kept a chunk")
	}
	sc.SetReadDeadline(time.Time{})
	go func() {
		time.Sleep(10 * time.Millisecond)
		peer.Write([]byte("late"))
		peer.Close()
	}()
	n, err := c.Read(p)
	if err != nil || string(p[:n]) != "late" {
		t.Fatalf("read %q, %v; want \"late\"", p[:n], err)
	}
	if _, err := c.Read(p); err != io.EOF {
		t.Fatalf("read after the peer closed: %v, want EOF", err)
	}
	if c.chunk != nil {
		t.Fatal("chunk kept at EOF")
	}
}

// deadlineConn counts SetWriteDeadline calls.
type deadlineConn struct {
	recordConn
	deadlines int
}

func (c *deadlineConn) SetWriteDeadline(time.Time) error { c.deadlines++; return nil }

// A writer that corks every round with the same timeout arms the socket's
// deadline once, not twice per round.
func TestConnKeepsItsDeadlineAcrossCorks(t *testing.T) {
	dc := &deadlineConn{}
	c := New(dc)
	for range 1000 {
		c.Cork(time.Now().Add(10 * time.Second))
		c.Write([]byte("frame"))
		if err := c.Uncork(); err != nil {
			t.Fatal(err)
		}
	}
	if dc.deadlines > 2 {
		t.Fatalf("%d SetWriteDeadline calls for 1000 rounds", dc.deadlines)
	}
	if len(dc.writes) != 1000 {
		t.Fatalf("%d writes for 1000 rounds", len(dc.writes))
	}
}

// The deadline a cork left armed neither fails a later uncorked write (a
// pong long after) nor a later cork's.
func TestConnStaleDeadlineFailsNothing(t *testing.T) {
	peer, sc := tcpPair(t)
	c := New(sc)
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(peer)
		got <- b
	}()
	c.Cork(time.Now().Add(20 * time.Millisecond))
	c.Write([]byte("a"))
	if err := c.Uncork(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(40 * time.Millisecond)
	if _, err := c.Write([]byte("b")); err != nil {
		t.Fatalf("uncorked write after a cork's deadline passed: %v", err)
	}
	c.Cork(time.Now().Add(20 * time.Millisecond))
	time.Sleep(40 * time.Millisecond) // armed before the sleep, re-armed by the next cork
	c.Uncork()
	c.Cork(time.Now().Add(time.Second))
	c.Write([]byte("c"))
	if err := c.Uncork(); err != nil {
		t.Fatalf("corked write after an earlier cork's deadline passed: %v", err)
	}
	sc.Close()
	if b := <-got; string(b) != "abc" {
		t.Fatalf("peer read %q, want \"abc\"", b)
	}
}

// A burst larger than any chunk comes out whole and in order; once a read
// fills a small chunk the next ones take large ones.
func TestConnRawReadsABurstInOrder(t *testing.T) {
	peer, sc := tcpPair(t)
	c := New(sc)
	burst := make([]byte, 300<<10)
	for i := range burst {
		burst[i] = byte(i * 7)
	}
	go func() {
		peer.Write(burst)
		peer.Close()
	}()
	time.Sleep(20 * time.Millisecond) // let it queue up in the socket
	got, err := io.ReadAll(bufio.NewReaderSize(c, 128))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, burst) {
		t.Fatalf("read %d bytes, want the %d written, in order", len(got), len(burst))
	}
	if c.chunk != nil || c.ahead != nil {
		t.Fatal("chunk kept after draining")
	}
}
