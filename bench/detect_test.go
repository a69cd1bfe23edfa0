package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// lyingServer speaks just enough of PROTOCOL.md for the send scenario and
// misdelivers on purpose, to show that the correctness line catches it.
type lyingServer struct {
	fault string // "drop", "dup" or "reorder": what it does to every 10th delivery

	mu       sync.Mutex
	next     int
	tokens   map[string]string            // token → user id
	groups   map[string][]string          // conv → member ids
	seqs     map[string]int64             // conv → last seq
	sessions map[string][]*websocket.Conn // user id → sockets
	held     map[*websocket.Conn][]byte   // reorder: a delivery held back
}

func (l *lyingServer) id(p string) string {
	l.next++
	return fmt.Sprintf("%s%d", p, l.next)
}

func (l *lyingServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	reply := func(status int, v any) {
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(v)
	}
	l.mu.Lock()
	user := l.tokens[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")+r.URL.Query().Get("token")]
	l.mu.Unlock()
	switch r.URL.Path {
	case "/healthz":
	case "/metrics":
		fmt.Fprintln(w, "process_resident_memory_bytes 1e6\nprocess_cpu_seconds_total 1")
	case "/api/v1/auth/register":
		l.mu.Lock()
		u, tok := l.id("u"), l.id("t")
		l.tokens[tok] = u
		l.mu.Unlock()
		reply(201, map[string]any{"user": map[string]string{"id": u}, "token": tok})
	case "/api/v1/groups":
		var in struct {
			MemberIDs []string `json:"member_ids"`
		}
		json.NewDecoder(r.Body).Decode(&in)
		l.mu.Lock()
		c := l.id("c")
		l.groups[c] = append(in.MemberIDs, user)
		l.mu.Unlock()
		reply(201, map[string]any{"conversation": map[string]string{"id": c}})
	case "/api/v1/ws":
		l.serveWS(w, r, user)
	default:
		reply(404, map[string]any{"error": map[string]string{"code": "not_found"}})
	}
}

func (l *lyingServer) serveWS(w http.ResponseWriter, r *http.Request, user string) {
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer c.CloseNow()
	ctx := r.Context()
	c.Write(ctx, websocket.MessageText, []byte(`{"type":"hello","user":{"id":"`+user+`"},"session":"s","sequences":{"conversations":0}}`))
	l.mu.Lock()
	l.sessions[user] = append(l.sessions[user], c)
	l.mu.Unlock()
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			return
		}
		var f struct {
			Type, Req, Conv, Body string
			ClientMsgID           string `json:"client_msg_id"`
		}
		json.Unmarshal(b, &f)
		if f.Type != "send" {
			continue
		}
		// One lock over storing and delivering keeps seq order on the wire,
		// except where the fault says otherwise.
		l.mu.Lock()
		l.seqs[f.Conv]++
		seq := l.seqs[f.Conv]
		msg, _ := json.Marshal(map[string]any{"conv": f.Conv, "seq": seq, "from": user, "client_msg_id": f.ClientMsgID, "body": f.Body})
		c.Write(ctx, websocket.MessageText, []byte(`{"type":"sent","req":"`+f.Req+`","message":`+string(msg)+`,"duplicate":false}`))
		frame := []byte(`{"type":"msg","message":` + string(msg) + `}`)
		for _, m := range l.groups[f.Conv] {
			for _, s := range l.sessions[m] {
				if s == c {
					continue
				}
				l.deliver(ctx, s, frame, seq)
			}
		}
		l.mu.Unlock()
	}
}

func (l *lyingServer) deliver(ctx context.Context, s *websocket.Conn, frame []byte, seq int64) {
	faulty := seq%10 == 0
	switch {
	case faulty && l.fault == "drop":
		return
	case faulty && l.fault == "dup":
		s.Write(ctx, websocket.MessageText, frame)
	case faulty && l.fault == "reorder":
		l.held[s] = frame
		return
	}
	s.Write(ctx, websocket.MessageText, frame)
	if h := l.held[s]; h != nil {
		delete(l.held, s)
		s.Write(ctx, websocket.MessageText, h)
	}
}

func TestCorrectnessLineCatchesFaults(t *testing.T) {
	for _, c := range []struct {
		fault string
		bad   func(Correctness) int64
	}{
		{"drop", func(c Correctness) int64 { return c.Lost }},
		{"dup", func(c Correctness) int64 { return c.Duplicated }},
		{"reorder", func(c Correctness) int64 { return c.OrderViolations }},
	} {
		t.Run(c.fault, func(t *testing.T) {
			srv := httptest.NewServer(&lyingServer{fault: c.fault, tokens: map[string]string{}, groups: map[string][]string{},
				seqs: map[string]int64{}, sessions: map[string][]*websocket.Conn{}, held: map[*websocket.Conn][]byte{}})
			defer srv.Close()
			var out strings.Builder
			results, err := Run(context.Background(), Options{URL: srv.URL, Scenario: "send", Stdout: &out,
				Sizes: Sizes{Users: 4, Groups: 2, Members: 3, Senders: 2, Messages: 40}, DrainTimeout: 300 * time.Millisecond})
			if err == nil {
				t.Errorf("Run succeeded against a server that does %q", c.fault)
			}
			if len(results) != 1 {
				t.Fatalf("%d results: %v", len(results), err)
			}
			if got := c.bad(results[0].Correctness); got == 0 {
				t.Errorf("fault %q not counted: %+v\n%s", c.fault, results[0].Correctness, out.String())
			}
		})
	}
}
