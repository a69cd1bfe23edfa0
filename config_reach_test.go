package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The example configuration is the documentation of every key: it must
// load, and equal the defaults.
func TestConfigExampleHasReachDefaults(t *testing.T) {
	c, err := loadConfig("config.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Push, defaultConfig().Push; got != want {
		t.Errorf("push: example %+v, defaults %+v", got, want)
	}
	if c.Limits != defaultConfig().Limits {
		t.Errorf("limits: example %+v, defaults %+v", c.Limits, defaultConfig().Limits)
	}
}

func TestConfigRejectsReachKeys(t *testing.T) {
	dir := t.TempDir()
	for yaml, want := range map[string]string{
		"auth: {registration: sometimes}\n":                                         "auth.registration",
		"http: {trusted_proxies: [nonsense]}\n":                                     "trusted_proxies",
		"http: {public_url: chat.example.com}\n":                                    "public_url",
		"limits: {login_failures: -1}\n":                                            "login_failures",
		"push: {delay: 0s}\n":                                                       "push.delay",
		"tls: {cert_file: /nonexistent/cert.pem, key_file: /nonexistent/key.pem}\n": "tls.cert_file",
	} {
		p := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := loadConfig(p)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want one naming %s", yaml, err, want)
		}
	}
}
