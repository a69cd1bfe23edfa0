package server_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"testing"

	"github.com/imserver/imserver/server"
)

func TestClientAddr(t *testing.T) {
	trusted, err := server.ParseTrustedProxies([]string{"10.0.0.0/8", "192.168.1.1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, remote string
		xff          []string
		want         string
	}{
		{"direct client, header ignored", "203.0.113.7:5555", []string{"1.2.3.4"}, "203.0.113.7"},
		{"trusted proxy, one hop", "10.1.2.3:80", []string{"198.51.100.9"}, "198.51.100.9"},
		{"client-forged hops left of the real one", "10.1.2.3:80", []string{"6.6.6.6, 198.51.100.9"}, "198.51.100.9"},
		{"two trusted proxies", "192.168.1.1:80", []string{"198.51.100.9, 10.9.9.9"}, "198.51.100.9"},
		{"several header lines", "10.1.2.3:80", []string{"6.6.6.6", "198.51.100.9, 10.0.0.2"}, "198.51.100.9"},
		{"trusted proxy without header", "10.1.2.3:80", nil, "10.1.2.3"},
		{"garbage hop stops the walk", "10.1.2.3:80", []string{"198.51.100.9, not-an-ip"}, "10.1.2.3"},
		{"only trusted hops", "10.1.2.3:80", []string{"10.0.0.5"}, "10.0.0.5"},
		{"IPv6 client", "[2001:db8::1]:443", nil, "2001:db8::1"},
		{"IPv4-mapped proxy", "[::ffff:10.1.2.3]:80", []string{"198.51.100.9"}, "198.51.100.9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tc.remote
			for _, h := range tc.xff {
				r.Header.Add("X-Forwarded-For", h)
			}
			if got := server.ClientAddr(r, trusted); got != netip.MustParseAddr(tc.want) {
				t.Errorf("got %v, want %s", got, tc.want)
			}
		})
	}
	if _, err := server.ParseTrustedProxies([]string{"nonsense"}); err == nil {
		t.Error("ParseTrustedProxies accepted nonsense")
	}
}

// from sends requests as if from addr, through the trusted proxy the test
// server believes (127.0.0.1).
func from(addr string) http.Header { return http.Header{"X-Forwarded-For": {addr}} }

func trustLoopback(c *testConfig) {
	c.server.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
}

func TestLoginFailuresLimited(t *testing.T) {
	ts := newServer(t, trustLoopback, func(c *testConfig) { c.server.LoginFailures = 3 })
	ts.register(t, "alice")
	login := func(user, pw, addr string) response {
		t.Helper()
		r, err := ts.doErr("POST", "/api/v1/auth/login", "", map[string]string{"username": user, "password": pw}, from(addr))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// A successful login does not use the allowance.
	for range 5 {
		login("alice", "password-alice", "198.51.100.1").want(t, http.StatusOK)
	}
	for range 3 {
		login("alice", "wrong", "198.51.100.1").wantError(t, http.StatusUnauthorized, "unauthorized")
	}
	r := login("alice", "password-alice", "198.51.100.1").wantError(t, http.StatusTooManyRequests, "rate_limited")
	if s, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || s < 1 {
		t.Errorf("Retry-After: %q", r.Header.Get("Retry-After"))
	}
	if e, _ := r.JSON["error"].(map[string]any); e["retry_after_ms"] == nil {
		t.Errorf("no retry_after_ms in %s", r)
	}
	// Per username: another address cannot go on guessing alice's.
	login("alice", "wrong", "198.51.100.2").wantError(t, http.StatusTooManyRequests, "rate_limited")
	// Per address: the first address cannot guess other names either...
	login("nobody", "wrong", "198.51.100.1").wantError(t, http.StatusTooManyRequests, "rate_limited")
	// ...while a fresh address and name answer as usual, unknown users
	// exactly like wrong passwords.
	login("nobody", "wrong", "198.51.100.3").wantError(t, http.StatusUnauthorized, "unauthorized")
	bob := ts.register(t, "bob")
	_ = bob
	login("bob", "password-bob", "198.51.100.3").want(t, http.StatusOK)
}

func TestRegisterPerHourLimited(t *testing.T) {
	ts := newServer(t, trustLoopback, func(c *testConfig) { c.server.RegisterPerHour = 2 })
	reg := func(name, addr string) response {
		t.Helper()
		r, err := ts.doErr("POST", "/api/v1/auth/register", "", map[string]string{"username": name, "password": "password-" + name}, from(addr))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	reg("u1", "198.51.100.1").want(t, http.StatusCreated)
	// A refused registration does not count.
	reg("u1", "198.51.100.1").wantError(t, http.StatusConflict, "conflict")
	reg("u2", "198.51.100.1").want(t, http.StatusCreated)
	reg("u3", "198.51.100.1").wantError(t, http.StatusTooManyRequests, "rate_limited")
	reg("u3", "198.51.100.2").want(t, http.StatusCreated)
	// Without a trusted proxy the header means nothing: everyone here is
	// 127.0.0.1, whose allowance the proxy's clients did not use.
	reg("u4", "").want(t, http.StatusCreated)
}
