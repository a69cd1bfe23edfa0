package server_test

// PROTOCOL.md v1.2 for the endpoints of v1.1's reach: socket tickets beside
// an Authorization header, and uploads under http.read_timeout.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/imserver/imserver/chat"
)

// A ticket is the socket's credential whenever one is given: a used or
// unknown ticket is 401 before the upgrade even beside a valid
// Authorization header, and a good one is spent.
func TestHostileTicketBesideHeader(t *testing.T) {
	ts := newServer(t)
	alice := ts.register(t, "alice")
	dial := func(ticket string) int {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		c, res, err := websocket.Dial(ctx, "ws://"+ts.Host+"/api/v1/ws?ticket="+ticket,
			&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + alice.Token}}})
		if err != nil {
			if res == nil {
				t.Fatalf("dial: %v", err)
			}
			return res.StatusCode
		}
		c.CloseNow()
		return http.StatusSwitchingProtocols
	}
	tk := alice.ticket(t)
	if st := dial(tk); st != http.StatusSwitchingProtocols {
		t.Fatalf("a fresh ticket beside the header: %d, want 101", st)
	}
	if st := dial(tk); st != http.StatusUnauthorized {
		t.Fatalf("a used ticket beside a valid header: %d, want 401", st)
	}
	if st := dial(chat.NewID()); st != http.StatusUnauthorized {
		t.Fatalf("an unknown ticket beside a valid header: %d, want 401", st)
	}
}

// An upload is a request like any other: a body that trickles in is cut
// after http.read_timeout, however steadily it comes. One that arrives in
// time is answered, even when the arriving took longer than the write
// timeout the request started with.
func TestHostileTrickledUpload(t *testing.T) {
	ts := newServer(t)
	alice := ts.register(t, "alice")
	// Registering (a password hash) may take longer than these.
	ts.cfg.server.ReadTimeout = 1500 * time.Millisecond
	ts.cfg.server.APIWriteTimeout = 200 * time.Millisecond
	ts.restart()
	upload := func(size int, every time.Duration) (string, error) {
		conn, err := net.Dial("tcp", ts.Host)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "POST /api/v1/files?name=slow.txt HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: %d\r\n\r\n", ts.Host, alice.Token, size)
		go func() {
			for range size {
				if _, err := conn.Write([]byte("x")); err != nil {
					return
				}
				time.Sleep(every)
			}
		}()
		conn.SetReadDeadline(time.Now().Add(waitTimeout))
		answer, err := io.ReadAll(conn)
		return string(answer), err
	}
	// 600 bytes, one each 50 ms: 30 s if never cut.
	// Cut is an answer, an EOF or a reset (the client was still writing),
	// but not our own read deadline.
	answer, err := upload(600, 50*time.Millisecond)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a trickling upload was not cut: %v", err)
	}
	if answer != "" && !strings.HasPrefix(answer, "HTTP/1.1 400") {
		t.Errorf("answer to an upload that did not arrive in time: %q", answer)
	}
	// 8 bytes over about 400 ms: within the read timeout, past the write
	// timeout the request came with.
	answer, err = upload(8, 50*time.Millisecond)
	if err != nil || !strings.HasPrefix(answer, "HTTP/1.1 201") {
		t.Fatalf("an upload that arrived in time: %q %v, want 201", answer, err)
	}
}
