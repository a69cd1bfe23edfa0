package main

import (
	"database/sql"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/imserver/imserver/storage"
)

// TestVersionAndHealthz: `imserver version` prints the version, /healthz
// reports version, commit and the database's schema beside its checks, and
// `imserver healthcheck` passes against it and fails against nothing.
func TestVersionAndHealthz(t *testing.T) {
	out, err := exec.Command(serverBin, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "imserver ") {
		t.Fatalf("version: %v %q", err, out)
	}
	dir := t.TempDir()
	p := startServer(t, filepath.Join(dir, "v.db"), writeConfig(t, dir, ""))
	resp, err := http.Get(p.base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h struct {
		Status  string            `json:"status"`
		Checks  map[string]string `json:"checks"`
		Version string            `json:"version"`
		Commit  *string           `json:"commit"`
		Schema  int               `json:"schema"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatal(err)
	}
	if h.Status != "ok" || h.Checks["sqlite"] != "ok" || h.Version == "" || h.Commit == nil || h.Schema != storage.KnownSchema() {
		t.Fatalf("healthz %+v, want ok, a version, a commit field and schema %d", h, storage.KnownSchema())
	}
	if !strings.HasPrefix(string(out), "imserver "+h.Version) {
		t.Fatalf("version prints %q, healthz says %q", out, h.Version)
	}
	if out, err := exec.Command(serverBin, "healthcheck", "--url", p.base+"/healthz").CombinedOutput(); err != nil {
		t.Fatalf("healthcheck against a healthy server: %v %s", err, out)
	}
	// Without --url it finds the server through the configured address.
	cmd := exec.Command(serverBin, "healthcheck")
	cmd.Env = append(os.Environ(), "IMSERVER_ADDR="+strings.TrimPrefix(p.base, "http://"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("healthcheck via IMSERVER_ADDR: %v %s", err, out)
	}
	if out, err := exec.Command(serverBin, "healthcheck", "--url", "http://"+freeAddr(t)+"/healthz").CombinedOutput(); err == nil {
		t.Fatalf("healthcheck with no server passed: %s", out)
	}
}

// TestServeRefusesNewerSchema: serve exits with the upgrade message instead
// of running on a database a newer imserver migrated.
func TestServeRefusesNewerSchema(t *testing.T) {
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "n.db")
	if out, err := exec.Command(serverBin, "user", "list", "--db", dbPath).CombinedOutput(); err != nil {
		t.Fatalf("creating the database: %v %s", err, out)
	}
	raw, err := sql.Open("sqlite", dbPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (9999, '9999_future.sql', 0)`); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	out, err := serveExits(t, dbPath)
	want := "database schema 9999 is newer than this imserver"
	if err == nil || !strings.Contains(out, want) || !strings.Contains(out, "upgrade imserver") {
		t.Fatalf("serve: err %v, output %q, want %q", err, out, want)
	}
}

// TestServeFromEnvironment: a server configured only by environment
// variables (as in a container) listens and stores where they say, and a
// flag still overrides them.
func TestServeFromEnvironment(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddr(t)
	cmd := exec.Command(serverBin, "serve", "--db", filepath.Join(dir, "flag.db"))
	cmd.Env = append(os.Environ(), "IMSERVER_ADDR="+addr, "IMSERVER_DB="+filepath.Join(dir, "env.db"), "IMSERVER_STORM_THRESHOLD=20")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no server on IMSERVER_ADDR %s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(dir, "flag.db")); err != nil {
		t.Fatalf("--db did not override IMSERVER_DB: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "env.db")); err == nil {
		t.Fatal("IMSERVER_DB was used although --db was given")
	}
	// A misspelt variable stops the start with its name.
	bad := exec.Command(serverBin, "serve", "--addr", freeAddr(t), "--db", filepath.Join(dir, "b.db"))
	bad.Env = append(os.Environ(), "IMSERVER_STROM_THRESHOLD=20")
	if out, err := bad.CombinedOutput(); err == nil || !strings.Contains(string(out), "IMSERVER_STROM_THRESHOLD sets no config key") {
		t.Fatalf("misspelt variable: err %v, output %s", err, out)
	}
}
