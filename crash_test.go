package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
)

var serverBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "imserver-test-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	serverBin = filepath.Join(dir, "imserver")
	if out, err := exec.Command("go", "build", "-o", serverBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the server: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// serverEnv is the environment of the servers the tests start: they
// register many users from one address, which the per-address limits
// (limits.register_per_hour, limits.login_failures) would stop.
func serverEnv() []string {
	return append(os.Environ(), "IMSERVER_LIMITS_REGISTER_PER_HOUR=0", "IMSERVER_LIMITS_LOGIN_FAILURES=0")
}

// proc is a server subprocess.
type proc struct {
	cmd  *exec.Cmd
	base string
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func startServer(t *testing.T, db, config string) *proc {
	t.Helper()
	addr := freeAddr(t)
	cmd := exec.Command(serverBin, "serve", "--addr", addr, "--db", db, "--config", config)
	cmd.Env = serverEnv()
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, base: "http://" + addr}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(p.base + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("server did not become healthy; output:\n%s", logs.String())
	return nil
}

func (p *proc) do(t *testing.T, method, path, token string, body, out any) int {
	t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, _ := http.NewRequest(method, p.base+path, rd)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatalf("%s %s: decoding: %v", method, path, err)
		}
	}
	return resp.StatusCode
}

type storedMsg struct {
	Seq         int64  `json:"seq"`
	ClientMsgID string `json:"client_msg_id"`
	From        string `json:"from"`
	Body        string `json:"body"`
}

// TestCrashKeepsEverySentMessage kills the server with SIGKILL while
// clients pipeline sends, restarts it on the same file, and checks the
// durability and dedup guarantees: every message answered `sent` is there
// once with its seq, seqs strictly increase, and resending every message
// (answered or not) with its client_msg_id never stores one twice.
func TestCrashKeepsEverySentMessage(t *testing.T) {
	crashKeepsEverySentMessage(t, "")
}

// TestCrashKeepsEverySentMessagePipelinedSync is the same with the WAL
// fsynced beside the writer (sqlite.pipelined_sync): the writer's
// connection runs synchronous NORMAL, and answers wait for the syncer.
func TestCrashKeepsEverySentMessagePipelinedSync(t *testing.T) {
	crashKeepsEverySentMessage(t, "  pipelined_sync: true\n")
}

func crashKeepsEverySentMessage(t *testing.T, sqliteExtra string) {
	dir := t.TempDir()
	db := filepath.Join(dir, "crash.db")
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte("limits:\n  send_rate: 1000000\n  send_burst: 1000000\nsqlite:\n  synchronous: FULL\n"+sqliteExtra), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startServer(t, db, cfg)

	var auth struct {
		Token string `json:"token"`
		User  struct {
			ID string `json:"id"`
		} `json:"user"`
	}
	if code := p.do(t, "POST", "/api/v1/auth/register", "", map[string]string{"username": "crash", "password": "password123"}, &auth); code != 201 {
		t.Fatalf("register: %d", code)
	}
	var grp struct {
		Conversation struct {
			ID string `json:"id"`
		} `json:"conversation"`
	}
	if code := p.do(t, "POST", "/api/v1/groups", auth.Token, map[string]any{"name": "crash", "member_ids": []string{}}, &grp); code != 201 {
		t.Fatalf("group: %d", code)
	}
	conv := grp.Conversation.ID

	const senders, perSender = 4, 3000
	var mu sync.Mutex
	acked := map[string]int64{} // client_msg_id -> seq answered by `sent`
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	killAt := make(chan struct{})
	var once sync.Once
	for s := 0; s < senders; s++ {
		wg.Add(1)
		go func(s int) {
			defer wg.Done()
			c, _, err := websocket.Dial(ctx, "ws"+p.base[len("http"):]+"/api/v1/ws?token="+auth.Token, nil)
			if err != nil {
				t.Errorf("dial: %v", err)
				return
			}
			defer c.CloseNow()
			go func() {
				for i := 0; i < perSender; i++ {
					f, _ := json.Marshal(map[string]any{"type": "send", "req": "r", "conv": conv, "client_msg_id": fmt.Sprintf("s%d-%d", s, i), "body": "x"})
					if c.Write(ctx, websocket.MessageText, f) != nil {
						return
					}
				}
			}()
			for {
				_, data, err := c.Read(ctx)
				if err != nil {
					return // the server was killed
				}
				var fr struct {
					Type    string    `json:"type"`
					Message storedMsg `json:"message"`
				}
				if json.Unmarshal(data, &fr) != nil || fr.Type != "sent" {
					continue
				}
				mu.Lock()
				acked[fr.Message.ClientMsgID] = fr.Message.Seq
				if len(acked) >= senders*perSender/3 {
					once.Do(func() { close(killAt) })
				}
				mu.Unlock()
			}
		}(s)
	}
	select {
	case <-killAt:
	case <-ctx.Done():
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		t.Fatalf("only %d sends answered before the deadline", n)
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Wait()
	wg.Wait()
	mu.Lock()
	answered := len(acked)
	mu.Unlock()
	t.Logf("%d sends answered before SIGKILL", answered)

	p = startServer(t, db, cfg)
	stored := fetchAll(t, p, auth.Token, conv)
	byID := map[string]storedMsg{}
	for i, m := range stored {
		if i > 0 && m.Seq <= stored[i-1].Seq {
			t.Fatalf("seq %d after %d: not strictly increasing", m.Seq, stored[i-1].Seq)
		}
		if _, dup := byID[m.ClientMsgID]; dup {
			t.Fatalf("client_msg_id %s stored twice", m.ClientMsgID)
		}
		byID[m.ClientMsgID] = m
	}
	for id, seq := range acked {
		m, ok := byID[id]
		if !ok {
			t.Fatalf("message %s was answered sent (seq %d) but is lost", id, seq)
		}
		if m.Seq != seq {
			t.Fatalf("message %s: stored seq %d, answered %d", id, m.Seq, seq)
		}
	}

	// Resend everything: answered ones must come back as duplicates with
	// their seq; unanswered ones are stored once (or found, if they had
	// committed without their answer reaching the client).
	for s := 0; s < senders; s++ {
		for i := 0; i < perSender; i += 7 {
			id := fmt.Sprintf("s%d-%d", s, i)
			var out struct {
				Message   storedMsg `json:"message"`
				Duplicate bool      `json:"duplicate"`
			}
			code := p.do(t, "POST", "/api/v1/conversations/"+conv+"/messages", auth.Token, map[string]string{"client_msg_id": id, "body": "retry"}, &out)
			if prev, ok := byID[id]; ok {
				if code != 200 || !out.Duplicate || out.Message.Seq != prev.Seq || out.Message.Body != "x" {
					t.Fatalf("resend of stored %s: code %d dup %v seq %d (want 200 true %d, first body)", id, code, out.Duplicate, out.Message.Seq, prev.Seq)
				}
			} else if code != 201 || out.Duplicate {
				t.Fatalf("resend of unstored %s: code %d dup %v, want 201 false", id, code, out.Duplicate)
			}
		}
	}
	after := fetchAll(t, p, auth.Token, conv)
	seen := map[string]bool{}
	for i, m := range after {
		if seen[m.ClientMsgID] {
			t.Fatalf("after resend, %s is stored twice", m.ClientMsgID)
		}
		seen[m.ClientMsgID] = true
		if i > 0 && m.Seq <= after[i-1].Seq {
			t.Fatalf("after resend, seq %d follows %d", m.Seq, after[i-1].Seq)
		}
	}
}

func fetchAll(t *testing.T, p *proc, token, conv string) []storedMsg {
	t.Helper()
	var all []storedMsg
	after := int64(0)
	for {
		var page struct {
			Messages  []storedMsg `json:"messages"`
			Completed bool        `json:"completed"`
		}
		if code := p.do(t, "GET", fmt.Sprintf("/api/v1/conversations/%s/messages?after_seq=%d&limit=1000", conv, after), token, nil, &page); code != 200 {
			t.Fatalf("messages: %d", code)
		}
		all = append(all, page.Messages...)
		if page.Completed || len(page.Messages) == 0 {
			return all
		}
		after = page.Messages[len(page.Messages)-1].Seq
	}
}
