package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// websocket.max_sessions_per_user holds for a user's sockets on every
// process sharing Redis, not per process: with a cap of 2, one socket on
// A and one on B leave no room on either; closing one makes room on the
// other.
func TestRedisSocketCapAcrossProcesses(t *testing.T) {
	r := startRedis(t)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, fmt.Sprintf(`redis: %s
websocket:
  max_sessions_per_user: 2
`, r.url()))
	db := filepath.Join(dir, "cap.db")
	a, b := startLogged(t, "A", db, cfg), startLogged(t, "B", db, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	alice := registerUser(t, a, "alice")
	bob := registerUser(t, a, "bob")
	dial := func(p *lproc, token string) (*websocket.Conn, int) {
		c, res, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(p.base, "http")+"/api/v1/ws?token="+token, nil)
		if err != nil {
			if res != nil {
				return nil, res.StatusCode
			}
			t.Fatalf("dial: %v", err)
		}
		t.Cleanup(func() { c.CloseNow() })
		return c, 101
	}
	onA, status := dial(a, alice.Token)
	if status != 101 {
		t.Fatalf("first socket on A: %d", status)
	}
	if _, status := dial(b, alice.Token); status != 101 {
		t.Fatalf("second socket, on B: %d", status)
	}
	for _, p := range []*lproc{a, b} {
		if _, status := dial(p, alice.Token); status != 429 {
			t.Fatalf("a third socket on %s: %d, want 429", p.base, status)
		}
	}
	if _, status := dial(b, bob.Token); status != 101 {
		t.Fatalf("another user's socket: %d", status)
	}
	onA.Close(websocket.StatusNormalClosure, "")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, status := dial(b, alice.Token)
		if status == 101 {
			break
		}
		if status != 429 || time.Now().After(deadline) {
			t.Fatalf("a socket on B once A's closed: %d, want 101", status)
		}
	}
}
