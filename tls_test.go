package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/letsencrypt/challtestsrv"
	"github.com/letsencrypt/pebble/v2/ca"
	"github.com/letsencrypt/pebble/v2/db"
	"github.com/letsencrypt/pebble/v2/va"
	"github.com/letsencrypt/pebble/v2/wfe"
)

// selfSigned writes a certificate for localhost and 127.0.0.1 and its key
// as PEM files, and returns their paths and a pool that trusts it.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(c)
	return certFile, keyFile, pool
}

// syncBuf collects a process's output.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startTLS runs the server binary with config and waits until GET url
// answers 200 through client.
func startTLS(t *testing.T, config, url string, client *http.Client, wait time.Duration) *syncBuf {
	t.Helper()
	cmd := exec.Command(serverBin, "serve", "--db", filepath.Join(t.TempDir(), "tls.db"), "--config", config)
	logs := &syncBuf{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(wait)
	var lastErr error
	for time.Now().Before(deadline) {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return logs
			}
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		lastErr = err
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("server did not answer over HTTPS: %v; output:\n%s", lastErr, logs.String())
	return nil
}

func port(addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return n
}

func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

func TestTLSFromFiles(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	addr, plain := freeAddr(t), freeAddr(t)
	cfg := writeConfig(t, dir, fmt.Sprintf("addr: %s\ntls:\n  cert_file: %s\n  key_file: %s\n  http_addr: %s\n", addr, certFile, keyFile, plain))
	client := &http.Client{Timeout: 10 * time.Second, CheckRedirect: noRedirects,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	startTLS(t, cfg, "https://"+addr+"/healthz", client, 20*time.Second)

	resp, err := client.Get("https://" + addr + "/api/v1/me")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("Strict-Transport-Security"), "max-age=") {
		t.Errorf("HTTPS answer: %d, HSTS %q", resp.StatusCode, resp.Header.Get("Strict-Transport-Security"))
	}
	// The WebSocket works over TLS (HTTP/1.1 upgrade).
	reg, err := client.Post("https://"+addr+"/api/v1/auth/register", "application/json", strings.NewReader(`{"username":"tls","password":"password-tls"}`))
	if err != nil {
		t.Fatal(err)
	}
	var auth struct {
		Token string `json:"token"`
	}
	json.NewDecoder(reg.Body).Decode(&auth)
	reg.Body.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "wss://"+addr+"/api/v1/ws?token="+auth.Token, &websocket.DialOptions{HTTPClient: client})
	if err != nil {
		t.Fatalf("wss: %v", err)
	}
	if _, hello, err := ws.Read(ctx); err != nil || !strings.Contains(string(hello), `"hello"`) {
		t.Errorf("wss hello: %s %v", hello, err)
	}
	ws.Close(websocket.StatusNormalClosure, "")

	// The plain port sends everyone to HTTPS, path and query kept.
	resp, err = client.Get("http://" + plain + "/some/page?x=1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// On the HTTPS listener's port: not 443 here.
	host, _, _ := net.SplitHostPort(plain)
	_, port, _ := net.SplitHostPort(addr)
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "https://"+net.JoinHostPort(host, port)+"/some/page?x=1" {
		t.Errorf("plain port: %d Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	// The container health check asks the server over HTTPS.
	if out, err := exec.Command(serverBin, "healthcheck", "--config", cfg).CombinedOutput(); err != nil {
		t.Errorf("healthcheck of a TLS server: %v\n%s", err, out)
	}
	// Plain HTTP on the TLS port is refused, not served.
	if resp, err := client.Get("http://" + addr + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("plain HTTP served on the TLS port")
		}
	}
}

// A TLS configuration that cannot work is a clear error at start.
func TestTLSConfigErrors(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, _ := selfSigned(t, dir)
	garbage := filepath.Join(dir, "garbage.pem")
	os.WriteFile(garbage, []byte("not a certificate"), 0o600)
	for name, tc := range map[string]struct{ yaml, want string }{
		"missing cert file":   {fmt.Sprintf("tls:\n  cert_file: %s/nope.pem\n  key_file: %s\n", dir, keyFile), "nope.pem"},
		"missing key file":    {fmt.Sprintf("tls:\n  cert_file: %s\n  key_file: %s/nope.key\n", certFile, dir), "nope.key"},
		"garbage cert":        {fmt.Sprintf("tls:\n  cert_file: %s\n  key_file: %s\n", garbage, keyFile), "tls.cert_file"},
		"key without cert":    {fmt.Sprintf("tls:\n  key_file: %s\n", keyFile), "go together"},
		"both files and acme": {fmt.Sprintf("tls:\n  cert_file: %s\n  key_file: %s\n  acme:\n    domains: [chat.example.com]\n", certFile, keyFile), "either"},
		"bad domain":          {"tls:\n  acme:\n    domains: [\"https://x\"]\n", "not a host name"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := writeConfig(t, t.TempDir(), tc.yaml)
			out, err := exec.Command(serverBin, "serve", "--addr", freeAddr(t), "--db", filepath.Join(t.TempDir(), "x.db"), "--config", cfg).CombinedOutput()
			if err == nil {
				t.Fatalf("the server started; output:\n%s", out)
			}
			if !strings.Contains(string(out), tc.want) || strings.Contains(string(out), "panic") {
				t.Errorf("output does not say %q:\n%s", tc.want, out)
			}
		})
	}
}

// TestACMEWithPebble gets a certificate from Pebble, Let's Encrypt's test
// ACME server, run in this process with its own CA. Pebble validates for
// real, nothing is skipped: its DNS server (challtestsrv, also run here)
// resolves every name to 127.0.0.1, and it connects to the server's
// HTTP-01 port (tls.http_addr) or TLS port (TLS-ALPN-01), whichever
// challenge autocert takes. autocert refuses one-label names such as
// localhost, hence a made-up domain under .test.
func TestACMEWithPebble(t *testing.T) {
	t.Setenv("PEBBLE_VA_NOSLEEP", "1")
	const domain = "chat.imserver.test"
	dir := t.TempDir()
	addr, plain, dnsAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	logs := &syncBuf{}
	logger := log.New(logs, "pebble ", log.Lmicroseconds)
	dns, err := challtestsrv.New(challtestsrv.Config{DNSAddrs: []string{dnsAddr}, Log: logger})
	if err != nil {
		t.Fatal(err)
	}
	dns.SetDefaultDNSIPv4("127.0.0.1")
	dns.SetDefaultDNSIPv6("")
	go dns.Run()
	defer dns.Shutdown()
	store := db.NewMemoryStore()
	authority := ca.New(logger, store, "", "ecdsa", 0, 1, map[string]ca.Profile{"default": {Description: "default"}})
	validator := va.New(logger, port(plain), port(addr), false, dnsAddr, store)
	front := wfe.New(logger, store, validator, authority, []string{"pebble.letsencrypt.org"}, false, false, 1, 1)
	acmeSrv := httptest.NewTLSServer(front.Handler())
	defer acmeSrv.Close()
	caFile := filepath.Join(dir, "acme-ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: acmeSrv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, dir, fmt.Sprintf(`addr: %s
tls:
  http_addr: %s
  acme:
    domains: [%s]
    email: admin@example.com
    cache_dir: %s
    directory_url: %s/dir
    ca_file: %s
log:
  level: debug
`, addr, plain, domain, filepath.Join(dir, "acme-cache"), acmeSrv.URL, caFile))

	roots := x509.NewCertPool()
	roots.AddCert(authority.GetRootCert(0).Cert)
	client := &http.Client{Timeout: 30 * time.Second, CheckRedirect: noRedirects,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: domain}}}
	defer func() {
		if t.Failed() {
		}
	}()
	out := startTLS(t, cfg, "https://"+addr+"/healthz", client, 90*time.Second)

	resp, err := client.Get("https://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	leaf := resp.TLS.PeerCertificates[0]
	if leaf.VerifyHostname(domain) != nil || !strings.Contains(leaf.Issuer.CommonName, "Pebble") {
		t.Errorf("certificate: subject %v issuer %v", leaf.DNSNames, leaf.Issuer)
	}
	if resp.Header.Get("Strict-Transport-Security") == "" {
		t.Error("no HSTS header")
	}
	// The certificate is cached for the next start.
	if entries, _ := os.ReadDir(filepath.Join(dir, "acme-cache")); len(entries) == 0 {
		t.Error("acme cache is empty")
	}
	// The HTTP port redirects what is not a challenge.
	r2, err := client.Get("http://" + plain + "/")
	if err != nil {
		t.Fatal(err)
	}
	r2.Body.Close()
	if r2.StatusCode != http.StatusMovedPermanently {
		t.Errorf("plain port: %d", r2.StatusCode)
	}
	if !strings.Contains(logs.String(), domain) {
		t.Errorf("pebble saw no validation for %s", domain)
	}
}
