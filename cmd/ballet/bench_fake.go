package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"time"

	"github.com/balletplanner/ballet/gateway/fakellm"
)

// fakeProcess is the bench's fake model, a child process (ballet fake-llm):
// the model is not part of what a turn costs Ballet, so its CPU and memory
// are read apart from the bench process's (the worker, the load generator
// and the pub/sub reader).
type fakeProcess struct {
	url   string
	pid   int
	close func()
}

// cpu is the child's CPU time so far (/proc/<pid>/stat), 0 when unreadable.
func (f *fakeProcess) cpu() time.Duration {
	st, err := readProcStat(f.pid)
	if err != nil {
		return 0
	}
	return st.cpu
}

// startFakeProcess starts ballet fake-llm on a free port of 127.0.0.1 with
// script ("demo" or a path, see fakellm.Resolve), or when it is "" one text
// answer "ok" after latency, and waits until it listens.
func startFakeProcess(ctx context.Context, script string, latency time.Duration) (*fakeProcess, error) {
	if script != "" {
		if _, err := fakellm.Resolve(script); err != nil {
			return nil, fmt.Errorf("bench turns: --script: %w", err)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("bench turns: fake model: %w", err)
	}
	if script == "" {
		f, err := os.CreateTemp("", "ballet-bench-fake-*.yaml")
		if err != nil {
			return nil, fmt.Errorf("bench turns: fake model: %w", err)
		}
		defer os.Remove(f.Name()) // read once at the child's start
		_, err = fmt.Fprintf(f, "loop: true\nanswers:\n  - latency: %s\n    content:\n      - text: ok\n", latency)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("bench turns: fake model: %w", err)
		}
		script = f.Name()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench turns: fake model: %w", err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	cmd := exec.CommandContext(cctx, exe, "fake-llm", "--addr", addr, "--script", script)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 5 * time.Second // then killed
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("bench turns: fake model: %w", err)
	}
	f := &fakeProcess{url: "http://" + addr, pid: cmd.Process.Pid, close: func() {
		cancel()
		_ = cmd.Wait()
	}}
	// Wait for the listener (a temporary script must outlive the child's start).
	if err := waitListening(ctx, addr, 10*time.Second); err != nil {
		f.close()
		return nil, fmt.Errorf("bench turns: fake model: %w", err)
	}
	return f, nil
}

// waitListening dials addr until it answers, for at most timeout.
func waitListening(ctx context.Context, addr string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	var d net.Dialer
	for {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return c.Close()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not listening after %s: %w", addr, timeout, err)
		case <-t.C:
		}
	}
}
