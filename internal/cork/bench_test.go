package cork

import (
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// BenchmarkLoopbackWrite is the floor under a session's write: frames of
// 250 bytes (a `msg` frame with a 64-byte body) written through a cork.Conn
// on a loopback TCP connection whose other end a goroutine drains, one
// write call per op, with 1 or 6 frames gathered per call (a sender's
// `sent` and its 5 deliveries). cpu-ns/op is the process's CPU, the
// draining reader included, as the bench's is on the same machine.
func BenchmarkLoopbackWrite(b *testing.B) {
	for _, frames := range []int{1, 6} {
		b.Run(map[int]string{1: "1frame", 6: "6frames"}[frames], func(b *testing.B) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			done := make(chan struct{})
			go func() {
				defer close(done)
				c, err := l.Accept()
				if err != nil {
					return
				}
				io.Copy(io.Discard, c)
			}()
			raw, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			c := New(raw)
			frame := make([]byte, 250)
			b.ResetTimer()
			cpu0 := cpuTime()
			for range b.N {
				c.Cork(time.Time{})
				for range frames {
					c.Write(frame)
				}
				if err := c.Uncork(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
			raw.Close()
			<-done
		})
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
