package main

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"
)

// process is a ballet subprocess listening on ports of its own.
type process struct {
	cmd    *exec.Cmd
	addr   string
	mu     sync.Mutex
	stderr bytes.Buffer
	done   chan error
}

func (p *process) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.Write(b)
}

func (p *process) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startProcess runs `ballet <args>` with the api on a free port.
func startProcess(t *testing.T, env []string, args ...string) *process {
	t.Helper()
	api, ops := freeAddr(t), freeAddr(t)
	p := &process{addr: api, done: make(chan error, 1)}
	if args[0] == "worker" {
		p.addr = ops // a worker serves health and metrics on worker.addr
	}
	p.cmd = exec.Command(os.Args[0], args...)
	p.cmd.Env = append(cleanEnv(), append([]string{"BALLET_TEST_AS_MAIN=1",
		"BALLET_SERVER_ADDR=" + api, "BALLET_WORKER_ADDR=" + ops, "BALLET_GATEWAY_ADDR=" + freeAddr(t)}, env...)...)
	p.cmd.Stderr = p
	p.cmd.Stdout = io.Discard
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

func (p *process) waitReady(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		res, err := http.Get("http://" + p.addr + "/readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case err := <-p.done:
			t.Fatalf("process exited (%v) before ready:\n%s", err, p.log())
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Fatalf("not ready after 30s:\n%s", p.log())
}

func (p *process) get(t *testing.T, path string) string {
	t.Helper()
	res, err := http.Get("http://" + p.addr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, res.StatusCode, b)
	}
	return string(b)
}

// stop sends SIGTERM and expects a clean exit.
func (p *process) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		p.done <- err // for the cleanup
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, p.log())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("still running 30s after SIGTERM:\n%s", p.log())
	}
}
