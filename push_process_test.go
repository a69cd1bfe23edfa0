package main

import (
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestRedisPushSentOnce: two processes share the database and Redis; a
// message is pushed once, by the process that stored it, whichever
// process the recipient subscribed on.
func TestRedisPushSentOnce(t *testing.T) {
	r := startRedis(t)
	requests := make(chan string, 100)
	push := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		requests <- req.URL.Path
		w.WriteHeader(http.StatusCreated)
	}))
	defer push.Close()
	dir := t.TempDir()
	// The servers trust the fake push service's certificate as a system
	// root (Go reads SSL_CERT_FILE).
	caFile := filepath.Join(dir, "push-ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: push.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SSL_CERT_FILE", caFile)
	const delay = 300 * time.Millisecond
	cfg := writeConfig(t, dir, fmt.Sprintf("redis: %s\npush:\n  delay: %s\n  allow_private: true\n", r.url(), delay))
	db := filepath.Join(dir, "push.db")
	a := startLogged(t, "A", db, cfg)
	b := startLogged(t, "B", db, cfg)

	alice, bob := registerUser(t, a, "alice"), registerUser(t, b, "bob")
	conv := newDirect(t, a, alice, bob)
	key, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	auth := make([]byte, 16)
	rand.Read(auth)
	enc := base64.RawURLEncoding.EncodeToString
	sub := map[string]any{"endpoint": push.URL + "/bob", "keys": map[string]string{"p256dh": enc(key.PublicKey().Bytes()), "auth": enc(auth)}}
	if code := b.do(t, "POST", "/api/v1/push/subscriptions", bob.Token, sub, nil); code != http.StatusCreated {
		t.Fatalf("subscribe: %d", code)
	}
	// Both processes use the same VAPID key (made once, in the database).
	var ka, kb struct {
		PublicKey string `json:"public_key"`
	}
	a.do(t, "GET", "/api/v1/push/key", bob.Token, nil, &ka)
	b.do(t, "GET", "/api/v1/push/key", bob.Token, nil, &kb)
	if ka.PublicKey == "" || ka.PublicKey != kb.PublicKey {
		t.Fatalf("VAPID keys differ: %q %q", ka.PublicKey, kb.PublicKey)
	}

	for i, p := range []*lproc{a, b} {
		if res := httpSend(p, alice.Token, conv, fmt.Sprintf("m%d", i), "hello"); !res.ok() {
			t.Fatalf("send on process %d: %+v", i, res)
		}
		select {
		case path := <-requests:
			if path != "/bob" {
				t.Fatalf("push to %s", path)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("message %d was not pushed", i)
		}
		select {
		case <-requests:
			t.Fatalf("message %d was pushed twice", i)
		case <-time.After(5 * delay):
		}
	}
}
