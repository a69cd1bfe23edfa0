package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// embeddedServer is `imserver serve` run as a child process on a temporary
// database, one per scenario so that each starts from an empty server.
type embeddedServer struct {
	dir  string
	url  string
	cmd  *exec.Cmd
	log  *os.File
	exit chan error
	keep bool
	// startup is from the process's start to the first GET /healthz 200.
	startup time.Duration
}

// benchAdmin is the account the bench reads /metrics as on the servers it
// starts with its own configuration, which makes it an admin (an admin's
// token reads /metrics; binaries from before that gate ignore it, so A/B
// runs against them work as before).
const benchAdmin = "imbench-metrics"

// serverConfig raises the limits that would otherwise throttle a load test,
// and keeps storm mode out of the way: the figures are those of per-message
// delivery (storm mode trades latency for fewer frames on purpose).
func serverConfig(sqliteSync string) string {
	return fmt.Sprintf(`# written by imserver bench
limits:
  send_rate: 1000000
  send_burst: 1000000
  max_frame_bytes: 65536
  register_per_hour: 0
  login_failures: 0
sqlite:
  synchronous: %s
auth:
  registration: open
  admins: [%s]
storm:
  threshold: 1000000000
  lower_mark: 1
websocket:
  # idle opens thousands of sockets for a few users.
  max_sessions_per_user: 1000000
`, sqliteSync, benchAdmin)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startEmbedded starts bin and waits for GET /healthz to answer 200.
func startEmbedded(ctx context.Context, bin, config string, keep bool) (*embeddedServer, error) {
	return startEmbeddedOn(ctx, bin, config, "", keep)
}

// startEmbeddedOn is startEmbedded on the database file db ("" for a new
// one in the temporary directory), which stays when the server stops.
func startEmbeddedOn(ctx context.Context, bin, config, db string, keep bool) (*embeddedServer, error) {
	dir, err := os.MkdirTemp("", "imserver-bench-")
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	var lastErr error
	// The free port can be taken between choosing and binding it; try again then.
	for try := 0; try < 3; try++ {
		s, err := launch(ctx, bin, dir, cfg, db, keep)
		if err == nil {
			return s, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	if !keep {
		os.RemoveAll(dir)
	}
	return nil, lastErr
}

func launch(ctx context.Context, bin, dir, cfg, db string, keep bool) (*embeddedServer, error) {
	if db == "" {
		db = filepath.Join(dir, "bench.db")
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	logf, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "serve", "--addr", addr, "--db", db, "--config", cfg)
	cmd.Stdout, cmd.Stderr = logf, logf
	started := time.Now()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	s := &embeddedServer{dir: dir, url: "http://" + addr, cmd: cmd, log: logf, exit: make(chan error, 1), keep: keep}
	go func() { s.exit <- cmd.Wait() }()
	api := newAPIClient(s.url)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if api.healthy(ctx) {
			s.startup = time.Since(started)
			return s, nil
		}
		select {
		case err := <-s.exit:
			s.exit <- err
			logf.Close()
			return nil, fmt.Errorf("%s serve --addr %s exited before GET /healthz answered 200 (%v); log:\n%s", bin, addr, err, tail(filepath.Join(dir, "server.log"), 20))
		case <-ctx.Done():
			s.stop()
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond): // startup is measured to this
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("%s serve --addr %s: GET /healthz did not answer 200 within 30s; log:\n%s", bin, addr, tail(filepath.Join(dir, "server.log"), 20))
		}
	}
}

// stop asks the server to shut down (SIGTERM), kills it after 10s, and
// removes the temporary directory unless asked to keep it.
func (s *embeddedServer) stop() error {
	var err error
	if s.cmd.Process != nil {
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err = <-s.exit:
		case <-time.After(10 * time.Second):
			s.cmd.Process.Kill()
			err = <-s.exit
			err = fmt.Errorf("server did not stop within 10s of SIGTERM, killed: %v", err)
		}
	}
	s.log.Close()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.Sys() != nil {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM {
			err = nil // it ended by the signal we sent: fine
		}
	}
	if !s.keep {
		os.RemoveAll(s.dir)
	}
	return err
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(bytes.TrimSpace(b)), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
