package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestPopulateAndVacuumCommands: populate makes a history a server serves
// (the generated user logs in and lists its conversations) and refuses a
// file that exists; vacuum refuses while the server has the file open and
// works once it stopped.
func TestPopulateAndVacuumCommands(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "h.db")
	run := func(args ...string) (string, error) {
		out, err := exec.Command(serverBin, args...).CombinedOutput()
		return string(out), err
	}
	args := []string{"populate", "--db", db, "--users", "40", "--directs", "60", "--groups", "12", "--messages", "3000"}
	if out, err := run(args...); err != nil || !strings.Contains(out, "3000 messages") {
		t.Fatalf("populate: %v\n%s", err, out)
	}
	if out, err := run(args...); err == nil || !strings.Contains(out, "exists") {
		t.Fatalf("populate over an existing file: %v\n%s", err, out)
	}
	// --more also says what its appends cost: commits and WAL pages.
	if out, err := run("populate", "--more", "--db", db, "--messages", "500"); err != nil || !strings.Contains(out, "appended to") ||
		!strings.Contains(out, "cost of 500 appends") || !strings.Contains(out, "WAL pages/msg") {
		t.Fatalf("populate --more: %v\n%s", err, out)
	}
	p := startServer(t, db, writeConfig(t, dir, "log:\n  level: warn\n"))
	var login struct {
		Token string `json:"token"`
	}
	if code := p.do(t, "POST", "/api/v1/auth/login", "", map[string]string{"username": "pop0", "password": "populate-password-0123456789"}, &login); code != 200 {
		t.Fatalf("login as the generated user: %d", code)
	}
	var list struct {
		Conversations []struct {
			MaxSeq int64 `json:"max_seq"`
		} `json:"conversations"`
	}
	if code := p.do(t, "GET", "/api/v1/conversations?since=0&limit=1000", login.Token, nil, &list); code != 200 || len(list.Conversations) < 12 {
		t.Fatalf("conversations of pop0: %d, %d entries", code, len(list.Conversations))
	}
	if out, err := run("vacuum", "--db", db); err == nil || !strings.Contains(out, "open in another process") {
		t.Fatalf("vacuum beside a running server: %v\n%s", err, out)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.cmd.Wait()
	if out, err := run("vacuum", "--db", db); err != nil || !strings.Contains(out, "vacuumed") {
		t.Fatalf("vacuum: %v\n%s", err, out)
	}
}
