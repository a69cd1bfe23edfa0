package bench

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"
	"time"
)

// TestSeveralURLs: with --url a,b the sessions connect to both nodes in
// turn. Here b is a proxy in front of the same server that counts the
// WebSocket upgrades it passes on.
func TestSeveralURLs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := startEmbedded(ctx, serverBin, serverConfig("NORMAL"), false)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.stop()
	target, err := url.Parse(srv.url)
	if err != nil {
		t.Fatal(err)
	}
	var ws, metrics, other atomic.Int64
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/v1/ws":
			ws.Add(1)
		case "/metrics":
			metrics.Add(1)
		default:
			other.Add(1)
		}
		proxy.ServeHTTP(w, r)
	}))
	defer front.Close()

	cmd := Command()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	admin := newAPIClient(srv.url)
	if err := admin.signInAdmin(ctx); err != nil {
		t.Fatal(err)
	}
	cmd.SetArgs([]string{"--url", srv.url + "," + front.URL, "--metrics-token", admin.metricsToken, "--scenario", "send", "--users", "4", "--groups", "2", "--members", "2",
		"--senders", "4", "--messages", "40", "--progress=false"})
	if err := cmd.ExecuteContext(ctx); err != nil {
		t.Fatalf("bench: %v\nstderr: %s\nstdout: %s", err, errOut.String(), out.String())
	}
	// 4 sessions, every second one through the proxy; setup goes to the
	// first URL; every node's /metrics is read at the start and the end
	// of the measured phase, for its CPU per message.
	if ws.Load() != 2 || other.Load() != 0 || metrics.Load() != 2 {
		t.Errorf("the second node got %d WebSocket sessions, %d /metrics reads and %d other requests; want 2, 2 and 0", ws.Load(), metrics.Load(), other.Load())
	}
	if !bytes.Contains(out.Bytes(), []byte("cpu µs/msg nodes")) {
		t.Errorf("no per-node CPU in the report:\n%s", out.String())
	}
}

// TestReorderedAcrossNodes: a live seq below one already held is an order
// violation from one node, and only a note from several (each node
// publishes what it commits on its own); a repeat is a duplicate either way.
func TestReorderedAcrossNodes(t *testing.T) {
	for _, nodes := range []int{1, 2} {
		r := newRun("send", Options{}, Sizes{}, newAPIClient("http://a"))
		for i := 1; i < nodes; i++ {
			r.nodes = append(r.nodes, newAPIClient("http://b"))
		}
		s := newSession(0, &benchUser{}, r)
		s.addConv("c")
		for _, seq := range []int64{2, 1, 2} {
			s.deliverLocked(&message{Conv: []byte("c"), Seq: seq, Body: []byte("x")}, true, 0)
		}
		viol, reord, dup := r.stats.orderViolations.Load(), r.stats.reordered.Load(), r.stats.duplicated.Load()
		if nodes == 1 && (viol != 1 || reord != 0 || dup != 1) || nodes == 2 && (viol != 0 || reord != 1 || dup != 1) {
			t.Errorf("%d nodes: %d order violations, %d reordered, %d duplicated", nodes, viol, reord, dup)
		}
	}
}
