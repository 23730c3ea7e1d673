package main

import (
	"bytes"
	"github.com/balletplanner/ballet/internal/porttest"
	"io"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/balletplanner/ballet/store/storetest"
)

// process is a ballet subprocess listening on ports of its own.
type process struct {
	cmd  *exec.Cmd
	addr string
	// metrics is the process's metrics listener (metrics.addr).
	metrics string
	mu      sync.Mutex
	stderr  bytes.Buffer
	done    chan error
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

// freeAddr is an address for a child process to listen on (see porttest).
func freeAddr(t *testing.T) string {
	t.Helper()
	return porttest.Addr(t)
}

// startProcess runs `ballet <args>` with the api on a free port.
func startProcess(t *testing.T, env []string, args ...string) *process {
	t.Helper()
	return startWrapped(t, env, nil, args...)
}

// startWrapped is startProcess with the binary run by the command wrap
// (e.g. prlimit with its flags), when wrap is not empty.
func startWrapped(t *testing.T, env, wrap []string, args ...string) *process {
	t.Helper()
	api, ops := freeAddr(t), freeAddr(t)
	p := &process{addr: api, metrics: freeAddr(t), done: make(chan error, 1)}
	if args[0] == "worker" {
		p.addr = ops // a worker serves health on worker.addr
	}
	p.cmd = exec.Command(os.Args[0], args...)
	if len(wrap) > 0 {
		p.cmd = exec.Command(wrap[0], append(append(wrap[1:], os.Args[0]), args...)...)
	}
	p.cmd.Env = append(cleanEnv(), append([]string{"BALLET_TEST_AS_MAIN=1",
		"BALLET_SERVER_ADDR=" + api, "BALLET_WORKER_ADDR=" + ops, "BALLET_GATEWAY_ADDR=" + freeAddr(t),
		"BALLET_METRICS_ADDR=" + p.metrics}, env...)...)
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
	var exited error
	gone := false
	ready := storetest.Poll(storetest.WaitTimeout, func() bool {
		select {
		case exited = <-p.done:
			p.done <- exited // for the cleanup
			gone = true
			return true
		default:
		}
		res, err := http.Get("http://" + p.addr + "/readyz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
	switch {
	case gone:
		t.Fatalf("process exited (%v) before ready:\n%s", exited, p.log())
	case !ready:
		t.Fatalf("not ready after %s:\n%s", storetest.WaitTimeout, p.log())
	}
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
