package main

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// hasOther reports whether w received a frame (other than messages and
// replies) holding every one of parts.
func (w *wsClient) hasOther(parts ...string) bool {
	for _, f := range w.other {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(f, p)
		}
		if all {
			return true
		}
	}
	return false
}

// TestRedisTypingAndPresenceAcrossProcesses: with Redis, typing and
// presence reach a contact connected to another process; a user online in
// two processes goes offline only when its last session anywhere closes;
// hello lists contacts online in other processes.
func TestRedisTypingAndPresenceAcrossProcesses(t *testing.T) {
	r := startRedis(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "presence.db")
	cfg := writeConfig(t, dir, "redis: "+r.url()+"\nwebsocket:\n  presence_grace: 500ms\n")
	a := startLogged(t, "A", db, cfg)
	b := startLogged(t, "B", db, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	alice, bob := registerUser(t, a, "alice"), registerUser(t, a, "bob")
	conv := newDirect(t, a, alice, bob)

	bobB := dialWS(t, ctx, b, "bob@B", bob.Token)
	aliceA := dialWS(t, ctx, a, "alice@A", alice.Token)
	online := `"type":"presence","user":"` + alice.ID + `","online":true`
	offline := `"type":"presence","user":"` + alice.ID + `","online":false`
	if !bobB.waitFor(10*time.Second, func() bool { return bobB.hasOther(online) }) {
		t.Fatalf("bob on B did not hear alice come online on A: %v", bobB.other)
	}
	if err := aliceA.c.Write(ctx, websocket.MessageText, []byte(`{"type":"typing","conv":"`+conv+`"}`)); err != nil {
		t.Fatal(err)
	}
	if !bobB.waitFor(10*time.Second, func() bool { return bobB.hasOther(`"type":"typing"`, alice.ID, conv) }) {
		t.Fatalf("bob on B did not see alice typing on A: %v", bobB.other)
	}
	// The limit of one typing event per 3 s is per user and conversation,
	// not per process: alice typing at once again on B, where bob is, is
	// not relayed.
	typingB := dialWS(t, ctx, b, "alice@B typing", alice.Token)
	if err := typingB.c.Write(ctx, websocket.MessageText, []byte(`{"type":"typing","conv":"`+conv+`"}`)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	bobB.mu.Lock()
	typed := 0
	for _, f := range bobB.other {
		if strings.Contains(f, `"type":"typing"`) {
			typed++
		}
	}
	bobB.mu.Unlock()
	if typed != 1 {
		t.Fatalf("bob heard %d typing events of alice within the interval, from two processes, want 1", typed)
	}
	typingB.c.Close(websocket.StatusNormalClosure, "")

	// bob's hello on A lists alice (online on A) and a fresh one on B too.
	for _, p := range []*lproc{a, b} {
		c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(p.base, "http")+"/api/v1/ws?token="+bob.Token, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, hello, err := c.Read(ctx)
		c.CloseNow()
		if err != nil || !strings.Contains(string(hello), `"online":["`+alice.ID+`"]`) {
			t.Fatalf("bob's hello on %s: %s %v", p.base, hello, err)
		}
	}

	// Alice opens a session on B and closes the one on A: still online.
	aliceB := dialWS(t, ctx, b, "alice@B", alice.Token)
	aliceA.c.Close(websocket.StatusNormalClosure, "")
	time.Sleep(1500 * time.Millisecond) // past the grace
	bobB.mu.Lock()
	heard := bobB.hasOther(offline)
	bobB.mu.Unlock()
	if heard {
		t.Fatalf("bob heard alice go offline while she was online on B: %v", bobB.other)
	}
	aliceB.c.Close(websocket.StatusNormalClosure, "")
	if !bobB.waitFor(10*time.Second, func() bool { return bobB.hasOther(offline) }) {
		t.Fatalf("bob did not hear alice go offline: %v", bobB.other)
	}
}

// TestRedisPresenceOfStoppedProcess: a process that dies with sessions
// open (kill -9) or stops cleanly cannot tell its users' contacts they
// left; another process sharing Redis notices it stopped renewing its
// liveness and does, within seconds, unless the user is still online in
// another process.
func TestRedisPresenceOfStoppedProcess(t *testing.T) {
	r := startRedis(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "presence.db")
	cfg := writeConfig(t, dir, "redis: "+r.url()+"\nwebsocket:\n  presence_grace: 500ms\n")
	a := startLogged(t, "A", db, cfg)
	b := startLogged(t, "B", db, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	alice, bob, carol := registerUser(t, a, "alice"), registerUser(t, a, "bob"), registerUser(t, a, "carol")
	newDirect(t, a, alice, bob)
	newDirect(t, a, carol, bob)

	bobB := dialWS(t, ctx, b, "bob@B", bob.Token)
	dialWS(t, ctx, a, "alice@A", alice.Token)
	dialWS(t, ctx, a, "carol@A", carol.Token)
	dialWS(t, ctx, b, "carol@B", carol.Token) // carol stays online on B
	state := func(u rUser, online bool) string {
		return `"type":"presence","user":"` + u.ID + `","online":` + strconv.FormatBool(online)
	}
	if !bobB.waitFor(10*time.Second, func() bool { return bobB.hasOther(state(alice, true)) && bobB.hasOther(state(carol, true)) }) {
		t.Fatalf("bob on B did not hear alice and carol come online: %v", bobB.other)
	}

	killed := time.Now()
	a.kill()
	if !bobB.waitFor(20*time.Second, func() bool { return bobB.hasOther(state(alice, false)) }) {
		t.Fatalf("bob did not hear alice go offline after her process was killed: %v", bobB.other)
	}
	t.Logf("offline heard %s after the kill", time.Since(killed).Round(100*time.Millisecond))
	bobB.mu.Lock()
	carolLeft := bobB.hasOther(state(carol, false))
	bobB.mu.Unlock()
	if carolLeft {
		t.Errorf("bob heard carol go offline, though she is online on B: %v", bobB.other)
	}
	// A fresh session agrees: alice offline, carol online.
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(b.base, "http")+"/api/v1/ws?token="+bob.Token, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, hello, err := c.Read(ctx)
	c.CloseNow()
	if err != nil || !strings.Contains(string(hello), `"online":["`+carol.ID+`"]`) {
		t.Fatalf("bob's hello after the kill: %s %v", hello, err)
	}

	// A clean stop: the process's key expires and another buries it,
	// after the presence grace (nodeTTL), in which sockets would have
	// reconnected elsewhere.
	a2 := startLogged(t, "A2", db, cfg)
	dialWS(t, ctx, a2, "alice@A2", alice.Token)
	if !bobB.waitFor(10*time.Second, func() bool { return strings.Count(strings.Join(bobB.other, "\n"), state(alice, true)) == 2 }) {
		t.Fatalf("bob did not hear alice come back: %v", bobB.other)
	}
	stopped := time.Now()
	if err := a2.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-a2.exited
	if !bobB.waitFor(10*time.Second, func() bool { return strings.Count(strings.Join(bobB.other, "\n"), state(alice, false)) == 2 }) {
		t.Fatalf("bob did not hear alice go offline after her process stopped: %v", bobB.other)
	}
	t.Logf("offline heard %s after the stop", time.Since(stopped).Round(100*time.Millisecond))

	// A rolling restart: alice's process stops and her app reconnects to
	// B at once. Nobody is told she left.
	a3 := startLogged(t, "A3", db, cfg)
	dialWS(t, ctx, a3, "alice@A3", alice.Token)
	if !bobB.waitFor(10*time.Second, func() bool { return strings.Count(strings.Join(bobB.other, "\n"), state(alice, true)) == 3 }) {
		t.Fatalf("bob did not hear alice come back: %v", bobB.other)
	}
	if err := a3.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-a3.exited
	dialWS(t, ctx, b, "alice@B", alice.Token)
	time.Sleep(7 * time.Second) // past the stopped process's burial
	bobB.mu.Lock()
	offline := strings.Count(strings.Join(bobB.other, "\n"), state(alice, false))
	bobB.mu.Unlock()
	if offline != 2 {
		t.Errorf("bob heard alice go offline during a restart she reconnected through: %v", bobB.other)
	}
}
