package floor

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	_ "modernc.org/sqlite"
)

// cpuTime is the user and system CPU time of the process so far: the
// benchmarks report it per operation, which is steadier than wall time on
// a shared machine and counts every goroutine (the WebSocket reader, the
// runtime) as the server's figure does.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkBareSQLiteInsert is the floor under the storage writer: rows of
// a message (64-byte body) appended in arrival order to a table with an
// integer key, one narrow (conversation, seq) index, in WAL mode with
// synchronous=FULL (an fsync per commit), `rows` per transaction through
// prepared statements on one connection, round-robin over 100
// conversations. 40 rows per commit is about what the interactive bench's
// group commits hold; 1 is a commit per message. One op is one row.
func BenchmarkBareSQLiteInsert(b *testing.B) {
	for _, rows := range []int{1, 40} {
		b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) {
			dsn := "file:" + filepath.Join(b.TempDir(), "floor.db") +
				"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_txlock=immediate"
			db, err := sql.Open("sqlite", dsn)
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			db.SetMaxOpenConns(1)
			for _, q := range []string{
				`CREATE TABLE messages (id INTEGER PRIMARY KEY, conv INTEGER NOT NULL, seq INTEGER NOT NULL,
					sender INTEGER NOT NULL, client_msg_id TEXT NOT NULL, body TEXT NOT NULL, created INTEGER NOT NULL)`,
				`CREATE UNIQUE INDEX messages_conv_seq ON messages (conv, seq)`,
			} {
				if _, err := db.Exec(q); err != nil {
					b.Fatal(err)
				}
			}
			ctx := context.Background()
			body := strings.Repeat("x", 64)
			seqs := make([]int64, 100)
			b.ResetTimer()
			cpu0 := cpuTime()
			for i := 0; i < b.N; {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					b.Fatal(err)
				}
				st, err := tx.PrepareContext(ctx, `INSERT INTO messages (conv, seq, sender, client_msg_id, body, created) VALUES (?, ?, ?, ?, ?, ?)`)
				if err != nil {
					b.Fatal(err)
				}
				for r := 0; r < rows && i < b.N; r++ {
					conv := i % 100
					seqs[conv]++
					if _, err := st.ExecContext(ctx, conv, seqs[conv], conv, fmt.Sprint(i), body, int64(i)); err != nil {
						b.Fatal(err)
					}
					i++
				}
				st.Close()
				if err := tx.Commit(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkBareWebSocketWrite is the floor under a session's writer: one
// 250-byte text message (a `msg` frame with a 64-byte body) written per
// op by github.com/coder/websocket, server side, uncorked (one write
// system call each), on loopback TCP to a client of the same library that
// reads every message; cpu-ns/op counts both ends, as the server's and the
// bench's CPU share the machine in the bench.
func BenchmarkBareWebSocketWrite(b *testing.B) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	conns := make(chan *websocket.Conn, 1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		conns <- c
		<-r.Context().Done()
	})}
	go srv.Serve(l)
	defer srv.Close()
	ctx := context.Background()
	client, _, err := websocket.Dial(ctx, "ws://"+l.Addr().String(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer client.CloseNow()
	server := <-conns
	defer server.CloseNow()
	read := make(chan int)
	go func() {
		n := 0
		for {
			_, r, err := client.Reader(ctx)
			if err != nil {
				read <- n
				return
			}
			var buf [512]byte
			for {
				if _, err := r.Read(buf[:]); err != nil {
					break
				}
			}
			n++
		}
	}()
	frame := []byte(`{"type":"msg","message":{"conv":"01JD0000000000000000000000","seq":12345,"from":"01JD0000000000000000000001","client_msg_id":"c-123","kind":"text","body":"` + strings.Repeat("x", 64) + `","at":1732500000000}}`)
	b.ResetTimer()
	cpu0 := cpuTime()
	for range b.N {
		if err := server.Write(ctx, websocket.MessageText, frame); err != nil {
			b.Fatal(err)
		}
	}
	server.Close(websocket.StatusNormalClosure, "")
	got := <-read
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
	if got < b.N {
		b.Fatalf("client read %d of %d messages", got, b.N)
	}
}
