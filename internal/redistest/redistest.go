// Package redistest starts Redis servers of a test's own from the local
// redis-server binary: a lone server, a master with a replica watched by
// three sentinels, or a three-master cluster. Each listens on spare loopback
// ports with its data under t.TempDir() and is killed when the test ends;
// the shared Redis is never touched. BALLET_TEST_REDIS_SERVER names the
// binary when it is not redis-server on PATH.
package redistest

import (
	"bytes"
	"context"
	"fmt"
	"github.com/balletplanner/ballet/internal/porttest"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/balletplanner/ballet/store/storetest"
)

// startTimeout bounds how long a server takes to answer PING.
const startTimeout = 30 * time.Second

// Server is one redis-server (or sentinel) process.
type Server struct {
	// Addr is host:port.
	Addr string
	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	out  bytes.Buffer
}

func (s *Server) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.Write(b)
}

// Log is what the server wrote so far.
func (s *Server) Log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.String()
}

// Port is the server's port.
func (s *Server) Port() string {
	_, p, _ := net.SplitHostPort(s.Addr)
	return p
}

// Kill stops the server with SIGKILL and waits for it to exit.
func (s *Server) Kill() {
	_ = s.cmd.Process.Kill()
	<-s.done
}

// Client is a plain client of this one server, closed when t ends.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr, DialTimeout: time.Second})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func binary() (string, error) {
	if b := os.Getenv("BALLET_TEST_REDIS_SERVER"); b != "" {
		return b, nil
	}
	b, err := exec.LookPath("redis-server")
	if err != nil {
		return "", fmt.Errorf("redistest: no redis-server on PATH; set BALLET_TEST_REDIS_SERVER: %w", err)
	}
	return b, nil
}

func sparePort() (int, error) { return porttest.Spare() }

// start runs redis-server on a spare port with the configuration lines
// conf (plus port, bind and dir) and waits until it answers PING. sentinel
// starts it in sentinel mode.
func start(t testing.TB, name string, sentinel bool, conf ...string) *Server {
	t.Helper()
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var last *Server
	for range 3 { // a spare port may be taken between the probe and the start
		port, err := sparePort()
		if err != nil {
			t.Fatal(err)
		}
		lines := append([]string{"port " + strconv.Itoa(port), "bind 127.0.0.1", "dir " + dir,
			"save \"\"", "appendonly no", "protected-mode no", "logfile \"\""}, conf...)
		file := filepath.Join(dir, "redis.conf")
		if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		args := []string{file}
		if sentinel {
			args = append(args, "--sentinel")
		}
		s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), done: make(chan struct{})}
		s.cmd = exec.Command(bin, args...)
		s.cmd.Stdout, s.cmd.Stderr = s, s
		if err := s.cmd.Start(); err != nil {
			t.Fatalf("redistest: start %s: %v", name, err)
		}
		go func() { _ = s.cmd.Wait(); close(s.done) }()
		t.Cleanup(s.Kill)
		if s.ready() {
			return s
		}
		last = s
		s.Kill()
	}
	t.Fatalf("redistest: %s did not answer PING within %s:\n%s", name, startTimeout, last.Log())
	return nil
}

// ready polls PING until the server answers, or exits, or time runs out.
func (s *Server) ready() bool {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, DialTimeout: time.Second, MaxRetries: -1})
	defer c.Close()
	ok := false
	storetest.Poll(startTimeout, func() bool {
		select {
		case <-s.done:
			return true
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		ok = c.Ping(ctx).Err() == nil
		return ok
	})
	return ok
}

// Start starts a lone server.
func Start(t testing.TB) *Server {
	t.Helper()
	return start(t, "redis", false)
}
