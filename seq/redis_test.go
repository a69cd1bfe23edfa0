package seq

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestMain silences go-redis's pool log: the tests kill servers on purpose,
// and each failed dial would print a line.
func TestMain(m *testing.M) {
	redis.SetLogger(quietLogger{})
	os.Exit(m.Run())
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// testRedis is a redis-server of the test's own on a free port, never the
// shared one on 6379, with persistence off so that a restart comes back
// empty, like a crashed cache.
type testRedis struct {
	tb   testing.TB
	port int
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// startRedis starts a redis-server and stops it when the test ends. The test
// is skipped if redis-server is not installed.
func startRedis(tb testing.TB) *testRedis {
	tb.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		tb.Skip("redis-server not installed")
	}
	r := &testRedis{tb: tb}
	var err error
	// A free port can be taken between our probe and redis binding it, so
	// try a few.
	for range 5 {
		if r.port, err = freePort(); err != nil {
			tb.Fatal(err)
		}
		if err = r.start(); err == nil {
			tb.Cleanup(r.kill)
			return r
		}
	}
	tb.Fatalf("start redis-server: %v", err)
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (r *testRedis) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port)) }

// start runs redis-server on r.port and waits until it answers PING.
func (r *testRedis) start() error {
	cmd := exec.Command("redis-server",
		"--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", r.tb.TempDir(),
		"--loglevel", "warning")
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	r.cmd, r.done = cmd, done

	c := redis.NewClient(&redis.Options{Addr: r.addr(), DialTimeout: 100 * time.Millisecond, MaxRetries: -1, DialerRetries: 1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("redis-server on port %d exited: %w", r.port, err)
		default:
		}
		if time.Now().After(deadline) {
			r.kill()
			return fmt.Errorf("redis-server on port %d: no PONG: %w", r.port, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// kill stops the server at once, as a crash would.
func (r *testRedis) kill() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	<-r.done
	r.cmd = nil
}

// restart brings up a fresh, empty server on the same port.
func (r *testRedis) restart() {
	r.tb.Helper()
	r.kill()
	var err error
	for range 50 { // the port may linger for a moment after the kill
		if err = r.start(); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.tb.Fatalf("restart redis-server: %v", err)
}

// client returns a client set up as imserver should set up its own: context
// deadlines respected and short timeouts, so that a dead server fails fast.
func (r *testRedis) client() *redis.Client {
	r.tb.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:                  r.addr(),
		ContextTimeoutEnabled: true,
		DialTimeout:           200 * time.Millisecond,
		ReadTimeout:           time.Second,
		WriteTimeout:          time.Second,
		DialerRetries:         1,
		MaxRetries:            1,
	})
	r.tb.Cleanup(func() { _ = c.Close() })
	return c
}

func TestRedisErrorClassification(t *testing.T) {
	ctx := context.Background()
	r := startRedis(t)
	c := r.client()

	// A reply from a healthy server is the caller's problem, not an outage.
	if err := c.Set(ctx, "s", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	err := redisError(ctx, "test", c.LPush(ctx, "s", "y").Err())
	if err == nil || errors.Is(err, ErrUnavailable) {
		t.Errorf("WRONGTYPE: got %v, want an error not wrapping ErrUnavailable", err)
	}

	// A cancelled caller is not an outage either.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	err = redisError(cctx, "test", c.Ping(cctx).Err())
	if err == nil || errors.Is(err, ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: got %v, want context.Canceled without ErrUnavailable", err)
	}

	r.kill()
	err = redisError(ctx, "test", c.Ping(ctx).Err())
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("server down: got %v, want ErrUnavailable", err)
	}
}

func TestLuaScriptReloadsAfterScriptFlush(t *testing.T) {
	ctx := context.Background()
	r := startRedis(t)
	c := r.client()
	s := newLuaScript("return ARGV[1] + 1")
	for i := range 3 {
		if i == 1 {
			if err := c.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.run(ctx, c, nil, 41).Int64()
		if err != nil || got != 42 {
			t.Fatalf("run %d: got %d, %v; want 42", i, got, err)
		}
	}
	exists, err := c.ScriptExists(ctx, s.sha).Result()
	if err != nil || !exists[0] {
		t.Fatalf("script not cached after run: %v, %v", exists, err)
	}
}
