package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// server is one imserver process with its own database.
type server struct {
	URL  string
	log  string
	dir  string // its database, config and log
	addr string
	stop func() // ends the process (SIGINT, then a kill after 5s)
}

// startServer runs the binary on a free port. config is YAML appended to the
// defaults the tests need (send limits high enough for seeding).
func startServer(t *testing.T, config string) *server {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	s := &server{URL: "http://" + addr, dir: t.TempDir(), addr: addr}
	s.launch(t, config)
	return s
}

// dbPath is the server's database file.
func (s *server) dbPath() string { return filepath.Join(s.dir, "im.db") }

// restart stops the server and starts it again on the same database and
// address with config (the pages reconnect as after any outage); between
// the two, between (if not nil) may change the database.
func (s *server) restart(t *testing.T, config string, between func()) {
	t.Helper()
	s.stop()
	if between != nil {
		between()
	}
	s.launch(t, config)
}

func (s *server) launch(t *testing.T, config string) {
	t.Helper()
	cfg := filepath.Join(s.dir, "config.yaml")
	yaml := "limits: {send_rate: 10000, send_burst: 10000, register_per_hour: 0}\n"
	if !strings.Contains(config, "sqlite:") {
		yaml += "sqlite: {synchronous: NORMAL}\n"
	}
	yaml += config
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(s.dir, "server.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	s.log = logPath
	cmd := exec.Command(serverBin, "serve", "--addr", s.addr, "--db", s.dbPath(), "--config", cfg)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		logFile.Close()
		close(exited)
	}()
	var once sync.Once
	s.stop = func() {
		once.Do(func() {
			cmd.Process.Signal(os.Interrupt)
			select {
			case <-exited:
			case <-time.After(5 * time.Second):
				cmd.Process.Kill()
				<-exited
			}
		})
	}
	t.Cleanup(func() {
		s.stop()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("server log:\n%s", tail(string(b), 4000))
		}
	})

	deadline := time.Now().Add(20 * time.Second)
	for {
		res, err := http.Get(s.URL + "/healthz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(logPath)
			t.Fatalf("server exited at start:\n%s", b)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("server not healthy after 20s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// call does one API request as a user (token may be empty) and decodes the
// answer into out when out is not nil. It is for seeding and checking what
// the browser shows against the server's own view.
func (s *server) call(t *testing.T, token, method, path string, body, out any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, s.URL+"/api/v1"+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode >= 300 {
		t.Fatalf("%s %s: %d %s", method, path, res.StatusCode, strings.TrimSpace(string(b)))
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: decoding %q: %v", method, path, b, err)
		}
	}
}

type apiConv struct {
	ID      string `json:"id"`
	Kind    string `json:"kind"`
	Name    string `json:"name"`
	MaxSeq  int64  `json:"max_seq"`
	ReadSeq int64  `json:"read_seq"`
	Unread  int64  `json:"unread"`
	Left    bool   `json:"left"`
}

// sendAPI posts n messages "prefix 1".."prefix n" into conv as the token's user.
func (s *server) sendAPI(t *testing.T, token, conv, prefix string, n int) {
	t.Helper()
	for i := 1; i <= n; i++ {
		body := map[string]string{"client_msg_id": fmt.Sprintf("%s-%d-%d", prefix, i, time.Now().UnixNano()), "body": fmt.Sprintf("%s %d", prefix, i)}
		s.call(t, token, "POST", "/conversations/"+conv+"/messages", body, nil)
	}
}

func (s *server) conversation(t *testing.T, token, id string) apiConv {
	t.Helper()
	var r struct {
		Conversation apiConv `json:"conversation"`
	}
	s.call(t, token, "GET", "/conversations/"+id, nil, &r)
	return r.Conversation
}
