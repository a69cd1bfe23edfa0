// Package pgtest starts a real PostgreSQL for tests: initdb into a fresh
// temporary directory, run as an unprivileged user (initdb and postgres
// refuse root), on a free port with its unix socket beside the data, fsync
// and synchronous_commit on. A test binary shares one server and gives each
// test a schema of its own, which is much cheaper than a database.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Password is the superuser's password of every test server.
const Password = "imserver-test"

// Server is a PostgreSQL started by a test.
type Server struct {
	Dir    string // temporary directory: data/, sock/, log
	Addr   string // listen address (IP)
	Port   int
	bindir string
	cred   *syscall.Credential
	netns  string // network namespace the server runs in, "" for the test's

	mu   sync.Mutex
	cmd  *exec.Cmd
	exit chan struct{}
	n    atomic.Int64
}

// BinDir finds PostgreSQL's server binaries: pg_config --bindir, then the
// Debian layout.
func BinDir() (string, error) {
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		dir := strings.TrimSpace(string(out))
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, nil
		}
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(matches) > 0 {
		return filepath.Dir(matches[len(matches)-1]), nil
	}
	return "", errors.New("PostgreSQL server binaries (initdb, postgres) not found: install the postgresql package (.ci/run does)")
}

// Start initialises and starts a server listening on addr ("127.0.0.1"
// when empty) on a free port.
func Start(addr string) (*Server, error) { return StartIn("", addr) }

// StartIn is Start in the network namespace netns (ip netns), listening on
// addr, an address of that namespace, port 5432.
func StartIn(netns, addr string) (*Server, error) {
	bindir, err := BinDir()
	if err != nil {
		return nil, err
	}
	if addr == "" {
		addr = "127.0.0.1"
	}
	dir, err := os.MkdirTemp("", "imserver-pg-")
	if err != nil {
		return nil, err
	}
	s := &Server{Dir: dir, Addr: addr, bindir: bindir, netns: netns}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			u, err = user.Lookup("nobody")
		}
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("no unprivileged user to run PostgreSQL as: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, s.fail(err)
	}
	for _, d := range []string{"data", "sock"} {
		p := filepath.Join(dir, d)
		if err := os.Mkdir(p, 0o700); err != nil {
			return nil, s.fail(err)
		}
		if s.cred != nil {
			if err := os.Chown(p, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
				return nil, s.fail(err)
			}
		}
	}
	// Password authentication, as in production, so that a wrong password
	// can be tested; --no-sync only for the bootstrap files: the server
	// runs with fsync.
	pwfile := filepath.Join(dir, "pwfile")
	if err := os.WriteFile(pwfile, []byte(Password+"\n"), 0o644); err != nil {
		return nil, s.fail(err)
	}
	initdb := s.command("initdb", "-D", filepath.Join(dir, "data"), "-U", "postgres", "--auth=scram-sha-256", "--pwfile", pwfile,
		"-E", "UTF8", "--locale=C", "--no-sync")
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, s.fail(fmt.Errorf("initdb: %v\n%s", err, out))
	}
	// Nodes in other network namespaces connect over TCP from their own
	// addresses, with the password.
	hba, err := os.OpenFile(filepath.Join(dir, "data", "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return nil, s.fail(err)
	}
	_, err = hba.WriteString("host all all 0.0.0.0/0 scram-sha-256\n")
	if err = errors.Join(err, hba.Close()); err != nil {
		return nil, s.fail(err)
	}
	s.Port = 5432 // a namespace of its own has nothing else on it
	if netns == "" {
		port, err := freePort(addr)
		if err != nil {
			return nil, s.fail(err)
		}
		s.Port = port
	}
	if err := s.start(); err != nil {
		return nil, s.fail(err)
	}
	return s, nil
}

func (s *Server) fail(err error) error {
	os.RemoveAll(s.Dir)
	return err
}

func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.bindir, name), args...)
	cmd.Dir = s.Dir
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	return cmd
}

func freePort(addr string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// start runs postgres and waits until it accepts connections.
func (s *Server) start() error {
	log, err := os.OpenFile(filepath.Join(s.Dir, "postgres.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := s.command("postgres", "-D", filepath.Join(s.Dir, "data"),
		"-p", strconv.Itoa(s.Port), "-k", filepath.Join(s.Dir, "sock"),
		"-c", "listen_addresses="+s.Addr,
		"-c", "fsync=on", "-c", "synchronous_commit=on",
		"-c", "max_connections=300", "-c", "shared_buffers=64MB",
		"-c", "log_min_messages=warning")
	if s.netns != "" {
		// ip netns exec needs root; setpriv then drops to the user, and
		// both exec, so the process is postgres itself.
		args := append([]string{"netns", "exec", s.netns}, "setpriv")
		if s.cred != nil {
			args = append(args, fmt.Sprintf("--reuid=%d", s.cred.Uid), fmt.Sprintf("--regid=%d", s.cred.Gid), "--clear-groups")
		}
		args = append(args, cmd.Args[0])
		cmd = exec.Command("ip", append(args, cmd.Args[1:]...)...)
		cmd.Dir = s.Dir
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return err
	}
	exit := make(chan struct{})
	go func() { cmd.Wait(); log.Close(); close(exit) }()
	s.mu.Lock()
	s.cmd, s.exit = cmd, exit
	s.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, s.URL("postgres"))
		cancel()
		if err == nil {
			conn.Close(context.Background())
			return nil
		}
		select {
		case <-exit:
			b, _ := os.ReadFile(filepath.Join(s.Dir, "postgres.log"))
			return fmt.Errorf("postgres exited at start:\n%s", b)
		default:
		}
		if time.Now().After(deadline) {
			s.stop(syscall.SIGQUIT)
			return fmt.Errorf("postgres did not accept connections in 30s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// URL is the address of database db as the superuser.
func (s *Server) URL(db string) string {
	return fmt.Sprintf("postgres://postgres:%s@%s/%s?sslmode=disable", Password, s.HostPort(), db)
}

// HostPort is the server's host:port.
func (s *Server) HostPort() string { return net.JoinHostPort(s.Addr, strconv.Itoa(s.Port)) }

// NewDB creates an empty schema for one test and returns a URL whose
// connections use it (search_path). Dropped when the test ends.
func (s *Server) NewDB(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("t%d_%d", os.Getpid(), s.n.Add(1))
	s.exec(t, `CREATE SCHEMA `+name)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, s.URL("postgres"))
		if err == nil {
			conn.Exec(ctx, `DROP SCHEMA `+name+` CASCADE`)
			conn.Close(ctx)
		}
	})
	return s.URL("postgres") + "&search_path=" + name
}

// Exec runs sql as the superuser in the postgres database.
func (s *Server) exec(t testing.TB, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		t.Fatalf("connect to the test postgres: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// Restart stops the server (a fast shutdown: connections are cut, as in
// an operator's restart) and starts it again on the same port; down is
// how long it stays down.
func (s *Server) Restart(down time.Duration) error {
	s.stop(syscall.SIGINT)
	time.Sleep(down)
	return s.start()
}

// Stop stops the server (immediate shutdown) and removes its directory.
func (s *Server) Stop() {
	s.stop(syscall.SIGINT)
	os.RemoveAll(s.Dir)
}

func (s *Server) stop(sig syscall.Signal) {
	s.mu.Lock()
	cmd, exit := s.cmd, s.exit
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(sig)
	select {
	case <-exit:
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		<-exit
	}
}

// Log returns the server's log, for failing tests.
func (s *Server) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, "postgres.log"))
	return string(b)
}
