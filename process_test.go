package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
)

func writeConfig(t *testing.T, dir, body string) string {
	t.Helper()
	p := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestGracefulShutdown: SIGTERM closes sockets with 1001, the process exits
// cleanly, and an ack still waiting in memory is written before exit.
func TestGracefulShutdown(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "g.db")
	cfg := writeConfig(t, dir, "chat:\n  ack_flush_interval: 1h\n")
	p := startServer(t, db, cfg)
	var auth struct {
		Token string `json:"token"`
	}
	p.do(t, "POST", "/api/v1/auth/register", "", map[string]string{"username": "g", "password": "password123"}, &auth)
	var grp struct {
		Conversation struct {
			ID string `json:"id"`
		} `json:"conversation"`
	}
	p.do(t, "POST", "/api/v1/groups", auth.Token, map[string]any{"name": "g", "member_ids": []string{}}, &grp)
	conv := grp.Conversation.ID
	for _, id := range []string{"1", "2", "3"} {
		if code := p.do(t, "POST", "/api/v1/conversations/"+conv+"/messages", auth.Token, map[string]string{"client_msg_id": id, "body": "b"}, nil); code != 201 {
			t.Fatalf("send: %d", code)
		}
	}
	// The sender's own ack moved with its sends; a second member's ack is
	// what is pending.
	var other struct {
		Token string `json:"token"`
		User  struct {
			ID string `json:"id"`
		} `json:"user"`
	}
	p.do(t, "POST", "/api/v1/auth/register", "", map[string]string{"username": "h", "password": "password123"}, &other)
	p.do(t, "POST", "/api/v1/conversations/"+conv+"/members", auth.Token, map[string]any{"user_ids": []string{other.User.ID}}, nil)
	for _, id := range []string{"4", "5"} {
		p.do(t, "POST", "/api/v1/conversations/"+conv+"/messages", auth.Token, map[string]string{"client_msg_id": id, "body": "b"}, nil)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(p.base, "http")+"/api/v1/ws?token="+other.Token, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	if _, _, err := c.Read(ctx); err != nil { // hello
		t.Fatal(err)
	}
	ack, _ := json.Marshal(map[string]any{"type": "ack", "conv": conv, "seq": 5})
	if err := c.Write(ctx, websocket.MessageText, ack); err != nil {
		t.Fatal(err)
	}
	ping, _ := json.Marshal(map[string]any{"type": "ping", "req": "p"})
	if err := c.Write(ctx, websocket.MessageText, ping); err != nil {
		t.Fatal(err)
	}
	for { // the pong proves the ack frame was handled
		_, data, err := c.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), `"pong"`) {
			break
		}
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_, _, err = c.Read(ctx)
	if got, want := websocket.CloseStatus(err), websocket.StatusGoingAway; got != want {
		t.Fatalf("close status = %v (err %v), want %v", got, err, want)
	}
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("server exit: %v", err)
	}

	p = startServer(t, db, cfg)
	var entry struct {
		Conversation struct {
			LastAckSeq int64 `json:"last_ack_seq"`
		} `json:"conversation"`
	}
	p.do(t, "GET", "/api/v1/conversations/"+conv, other.Token, nil, &entry)
	if got, want := entry.Conversation.LastAckSeq, int64(5); got != want {
		t.Fatalf("last_ack_seq after restart = %d, want %d (pending ack lost at shutdown)", got, want)
	}
}

// TestUserCommands drives `imserver user` against a database file.
func TestUserCommands(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "u.db")
	run := func(stdin string, args ...string) (string, error) {
		cmd := exec.Command(serverBin, append(args, "--db", db)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run("", "user", "add", "carol", "--password", "password123", "--display-name", "Carol C"); err != nil || !strings.Contains(out, "created carol") {
		t.Fatalf("user add: %v %s", err, out)
	}
	if out, err := run("secret-pass-1\n", "user", "add", "dave"); err != nil || !strings.Contains(out, "created dave") {
		t.Fatalf("user add from stdin: %v %s", err, out)
	}
	if out, err := run("", "user", "add", "carol", "--password", "password123"); err == nil || !strings.Contains(out, "taken") {
		t.Fatalf("duplicate user add: err %v, out %s", err, out)
	}
	out, err := run("", "user", "list")
	if err != nil || !strings.Contains(out, "carol") || !strings.Contains(out, "Carol C") || !strings.Contains(out, "dave") {
		t.Fatalf("user list: %v %s", err, out)
	}

	// token_idle 8s: open sockets check their tokens every 2 s.
	p := startServer(t, db, writeConfig(t, dir, "auth:\n  registration: closed\n  token_idle: 8s\n"))
	if code := p.do(t, "POST", "/api/v1/auth/register", "", map[string]string{"username": "eve", "password": "password123"}, nil); code != 403 {
		t.Fatalf("register with registration closed: %d, want 403", code)
	}
	var login struct {
		Token string `json:"token"`
	}
	if code := p.do(t, "POST", "/api/v1/auth/login", "", map[string]string{"username": "dave", "password": "secret-pass-1"}, &login); code != 200 {
		t.Fatalf("login with the stdin password: %d", code)
	}
	// dave's socket, open when the password changes in another process
	// (no Redis, so no bus to tell the server): it is closed with 1008.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(p.base, "http")+"/api/v1/ws?token="+login.Token, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	if out, err := run("", "user", "passwd", "dave", "--password", "another-pass-2"); err != nil {
		t.Fatalf("passwd: %v %s", err, out)
	}
	for {
		if _, _, err := ws.Read(ctx); err != nil {
			if code := websocket.CloseStatus(err); code != websocket.StatusPolicyViolation {
				t.Fatalf("dave's socket after passwd: %v, want a close with 1008", err)
			}
			break
		}
	}
	if code := p.do(t, "GET", "/api/v1/me", login.Token, nil, nil); code != 401 {
		t.Fatalf("token after passwd: %d, want 401 (revoked)", code)
	}
	if code := p.do(t, "POST", "/api/v1/auth/login", "", map[string]string{"username": "dave", "password": "another-pass-2"}, nil); code != 200 {
		t.Fatalf("login with the new password: %d", code)
	}
	if out, err := run("", "user", "remove", "carol"); err != nil {
		t.Fatalf("remove: %v %s", err, out)
	}
	if code := p.do(t, "POST", "/api/v1/auth/login", "", map[string]string{"username": "carol", "password": "password123"}, nil); code != 401 {
		t.Fatalf("login of a removed user: %d, want 401", code)
	}
	// No secret is stored in clear.
	raw, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	wal, _ := os.ReadFile(db + "-wal")
	for _, secret := range []string{"secret-pass-1", "another-pass-2", login.Token} {
		if strings.Contains(string(raw), secret) || strings.Contains(string(wal), secret) {
			t.Fatalf("%q is stored in clear", secret)
		}
	}
}

// TestSecondServerWithoutRedisRefused: two servers on one SQLite file
// without Redis would hand out the same seqs and answer each other's
// sends with errors; the second one is refused at start, saying why, and
// the first goes on serving. With Redis (redis_*_test.go) they share it.
func TestSecondServerWithoutRedisRefused(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "one.db")
	cfg := writeConfig(t, dir, "")
	first := startLogged(t, "first", db, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, serverBin, "serve", "--addr", "127.0.0.1:0", "--db", db, "--config", cfg).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "served by another imserver") {
		t.Fatalf("a second server on the same file: %v\n%s", err, out)
	}
	registerUser(t, first, "alice") // the first still serves
}

// TestPopulateMoreBesideServerRefused: populate --more hands out seqs from
// the file as a server without Redis does; beside a running server both
// would take the same ones (the server's sends failed with a UNIQUE
// error), so it is refused and the server goes on serving.
func TestPopulateMoreBesideServerRefused(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "pop.db")
	if out, err := exec.Command(serverBin, "populate", "--db", db, "--users", "4", "--messages", "20", "--directs", "2", "--groups", "1", "--all-hands", "1").CombinedOutput(); err != nil {
		t.Fatalf("populate: %v\n%s", err, out)
	}
	srv := startLogged(t, "pop", db, writeConfig(t, dir, ""))
	out, err := exec.Command(serverBin, "populate", "--db", db, "--more", "--messages", "20").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "open in another process") {
		t.Fatalf("populate --more beside a server: %v\n%s", err, out)
	}
	registerUser(t, srv, "alice")
}

// TestUserListEveryAccount: `imserver user list` lists every account, not
// the API's page of 1000.
func TestUserListEveryAccount(t *testing.T) {
	db := filepath.Join(t.TempDir(), "many.db")
	if out, err := exec.Command(serverBin, "populate", "--db", db, "--users", "1200", "--messages", "0", "--directs", "10", "--groups", "5", "--all-hands", "1").CombinedOutput(); err != nil {
		t.Fatalf("populate: %v\n%s", err, out)
	}
	out, err := exec.Command(serverBin, "user", "list", "--db", db).CombinedOutput()
	if lines := strings.Count(string(out), "\n"); err != nil || lines != 1201 {
		t.Fatalf("user list: %v, %d lines, want a header and 1200 accounts", err, lines)
	}
}
