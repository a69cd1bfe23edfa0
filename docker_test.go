package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestDockerImage builds the image from the Dockerfile, runs it, and chats
// through it: two users register, one listens on the WebSocket, the other
// sends over HTTP. It needs a Docker engine; without one it says so.
func TestDockerImage(t *testing.T) {
	if out, err := exec.Command("docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		t.Skipf("docker engine not available: %v: %s", err, bytes.TrimSpace(out))
	}
	if testing.Short() {
		t.Skip("builds an image; not in -short")
	}
	docker := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("docker", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	tag := fmt.Sprintf("imserver-test:%d", time.Now().UnixNano())
	docker("build", "--build-arg", "VERSION=test", "-t", tag, ".")
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", tag).Run() })
	id := docker("run", "-d", "-p", "127.0.0.1::8080", tag)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := exec.Command("docker", "logs", id).CombinedOutput()
			t.Logf("container logs:\n%s", out)
		}
		_ = exec.Command("docker", "rm", "-f", "-v", id).Run()
	})
	hostPort := docker("port", id, "8080/tcp")
	hostPort = strings.Split(hostPort, "\n")[0]
	p := &proc{base: "http://" + hostPort}

	var health struct {
		Status  string `json:"status"`
		Version string `json:"version"`
		Schema  int    `json:"schema"`
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(p.base + "/healthz")
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&health)
			resp.Body.Close()
			if err == nil && health.Status == "ok" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("container not healthy: %v %+v", err, health)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if health.Version != "test" || health.Schema < 1 {
		t.Fatalf("healthz %+v: want version test and a schema", health)
	}
	// The image's own HEALTHCHECK command works inside the container.
	docker("exec", id, "/imserver", "healthcheck")

	type auth struct {
		Token string `json:"token"`
		User  struct {
			ID string `json:"id"`
		} `json:"user"`
	}
	var alice, bob auth
	if code := p.do(t, "POST", "/api/v1/auth/register", "", map[string]string{"username": "alice", "password": "password123"}, &alice); code != 201 {
		t.Fatalf("register alice: %d", code)
	}
	if code := p.do(t, "POST", "/api/v1/auth/register", "", map[string]string{"username": "bob", "password": "password123"}, &bob); code != 201 {
		t.Fatalf("register bob: %d", code)
	}
	var conv struct {
		Conversation struct {
			ID string `json:"id"`
		} `json:"conversation"`
	}
	p.do(t, "POST", "/api/v1/conversations/direct", alice.Token, map[string]string{"user_id": bob.User.ID}, &conv)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws://"+hostPort+"/api/v1/ws?token="+bob.Token, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	if _, _, err := c.Read(ctx); err != nil { // hello
		t.Fatal(err)
	}
	if code := p.do(t, "POST", "/api/v1/conversations/"+conv.Conversation.ID+"/messages", alice.Token, map[string]string{"client_msg_id": "a1", "body": "hello from a container"}, nil); code != 201 {
		t.Fatalf("send: %d", code)
	}
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), `"type":"msg"`) && strings.Contains(string(data), "hello from a container") {
			break
		}
	}
	// The database lives in the /data volume.
	docker("exec", id, "/imserver", "user", "list")
}
