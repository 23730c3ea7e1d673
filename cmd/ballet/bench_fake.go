package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
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

// cpu is the child's CPU time so far to the nanosecond, the run time of
// its threads (see procRunTime); 0 when unreadable.
func (f *fakeProcess) cpu() time.Duration {
	return procRunTime(f.pid)
}

// startFakeProcess starts ballet fake-llm on a free port of 127.0.0.1 with
// script ("demo" or a path, see fakellm.Resolve), or when it is "" one text
// answer "ok" after latency, and waits until it listens.
func startFakeProcess(ctx context.Context, script string, latency time.Duration) (*fakeProcess, error) {
	if script == "" {
		f, err := startFakeScript(ctx, fmt.Sprintf("loop: true\nanswers:\n  - latency: %s\n    content:\n      - text: ok\n", latency))
		if err != nil {
			return nil, fmt.Errorf("bench turns: %w", err)
		}
		return f, nil
	}
	if _, err := fakellm.Resolve(script); err != nil {
		return nil, fmt.Errorf("bench turns: --script: %w", err)
	}
	f, err := spawnFake(ctx, script)
	if err != nil {
		return nil, fmt.Errorf("bench turns: %w", err)
	}
	return f, nil
}

// startFakeScript starts ballet fake-llm with script, the text of a
// script file, and waits until it listens.
func startFakeScript(ctx context.Context, script string) (*fakeProcess, error) {
	f, err := os.CreateTemp("", "ballet-bench-fake-*.yaml")
	if err != nil {
		return nil, fmt.Errorf("fake model: %w", err)
	}
	defer os.Remove(f.Name()) // read once at the child's start
	_, err = f.WriteString(script)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("fake model: %w", err)
	}
	return spawnFake(ctx, f.Name())
}

// spawnFake starts ballet fake-llm on a free port of 127.0.0.1 with the
// script file at path and waits until it listens.
func spawnFake(ctx context.Context, script string) (*fakeProcess, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("fake model: %w", err)
	}
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	cmd := exec.CommandContext(cctx, exe, "fake-llm", "--addr", "127.0.0.1:0", "--script", script)
	cmd.Stderr = io.Discard
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		return nil, fmt.Errorf("fake model: %w", err)
	}
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 5 * time.Second // then killed
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("fake model: %w", err)
	}
	f := &fakeProcess{pid: cmd.Process.Pid, close: func() {
		cancel()
		_ = cmd.Wait()
	}}
	// The child picks its port and prints its URL once it listens (a
	// temporary script must outlive the child's start).
	if f.url, err = readListening(ctx, stdout, 10*time.Second); err != nil {
		f.close()
		return nil, fmt.Errorf("fake model: %w", err)
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }() // until the child exits
	return f, nil
}

// readListening reads r, the stdout of `ballet fake-llm`, until the line
// naming its URL, for at most timeout.
func readListening(ctx context.Context, r io.Reader, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	found := make(chan string, 1)
	go func() {
		defer close(found)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if url, ok := strings.CutPrefix(sc.Text(), fakeLLMListening); ok {
				found <- url
				return
			}
		}
	}()
	select {
	case url, ok := <-found:
		if !ok {
			return "", errors.New("exited before listening")
		}
		return url, nil
	case <-ctx.Done():
		return "", fmt.Errorf("not listening after %s", timeout)
	}
}
