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
	var ws, other atomic.Int64
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/ws" {
			ws.Add(1)
		} else {
			other.Add(1)
		}
		proxy.ServeHTTP(w, r)
	}))
	defer front.Close()

	cmd := Command()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs([]string{"--url", srv.url + "," + front.URL, "--scenario", "send", "--users", "4", "--groups", "2", "--members", "2",
		"--senders", "4", "--messages", "40", "--progress=false"})
	if err := cmd.ExecuteContext(ctx); err != nil {
		t.Fatalf("bench: %v\nstderr: %s\nstdout: %s", err, errOut.String(), out.String())
	}
	// 4 sessions, every second one through the proxy; setup and /metrics
	// go to the first URL.
	if ws.Load() != 2 || other.Load() != 0 {
		t.Errorf("the second node got %d WebSocket sessions and %d other requests; want 2 and 0", ws.Load(), other.Load())
	}
}
