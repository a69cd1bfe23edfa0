package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Values that mean nothing are refused at start with the key named, not
// replaced by a default.
func TestConfigRejectsNegativeDurationsAndSocketCap(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ yaml, want string }{
		{"websocket:\n  max_sessions_per_user: 0\n", "websocket.max_sessions_per_user must be >= 1"},
		{"websocket:\n  max_sessions_per_user: -3\n", "websocket.max_sessions_per_user must be >= 1"},
		{"http:\n  read_timeout: -1s\n", "http.read_timeout must not be negative"},
		{"http:\n  write_timeout: -5m\n", "http.write_timeout must not be negative"},
		{"auth:\n  token_idle: -1h\n", "auth.token_idle must not be negative"},
		{"auth:\n  token_max_age: -1h\n", "auth.token_max_age must not be negative"},
		{"chat:\n  ack_flush_interval: -200ms\n", "chat.ack_flush_interval must not be negative"},
	} {
		_, err := loadConfig(writeConfig(t, dir, c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("config %q: got error %v, want %q", c.yaml, err, c.want)
		}
	}
	for _, ok := range []string{"", "auth:\n  token_idle: 0s\n  token_max_age: 24h\nhttp:\n  read_timeout: 5s\nwebsocket:\n  max_sessions_per_user: 1\n"} {
		if _, err := loadConfig(writeConfig(t, dir, ok)); err != nil {
			t.Errorf("config %q: %v", ok, err)
		}
	}
	// And the server does not start on one.
	out, err := exec.Command(serverBin, "serve", "--addr", "127.0.0.1:0", "--db", filepath.Join(dir, "x.db"),
		"--config", writeConfig(t, dir, "http:\n  read_timeout: -1s\n")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "http.read_timeout must not be negative") {
		t.Fatalf("serve with a negative duration: %v\n%s", err, out)
	}
}
