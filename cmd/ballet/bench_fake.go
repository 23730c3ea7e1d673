package main

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/base64"
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
	url string
	// roots holds the certificate of a fake served over TLS (spawnFake
	// with useTLS); nil over cleartext.
	roots *x509.CertPool
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
		f, err := startFakeScript(ctx, fmt.Sprintf("loop: true\nanswers:\n  - latency: %s\n    content:\n      - text: ok\n", latency), false)
		if err != nil {
			return nil, fmt.Errorf("bench turns: %w", err)
		}
		return f, nil
	}
	if _, err := fakellm.Resolve(script); err != nil {
		return nil, fmt.Errorf("bench turns: --script: %w", err)
	}
	f, err := spawnFake(ctx, script, false)
	if err != nil {
		return nil, fmt.Errorf("bench turns: %w", err)
	}
	return f, nil
}

// startFakeScript starts ballet fake-llm with script, the text of a
// script file, over TLS when useTLS is set, and waits until it listens.
func startFakeScript(ctx context.Context, script string, useTLS bool) (*fakeProcess, error) {
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
	return spawnFake(ctx, f.Name(), useTLS)
}

// spawnFake starts ballet fake-llm on a free port of 127.0.0.1 with the
// script file at path, over TLS with a certificate of its own when useTLS
// is set, and waits until it listens.
func spawnFake(ctx context.Context, script string, useTLS bool) (*fakeProcess, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("fake model: %w", err)
	}
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	args := []string{"fake-llm", "--addr", "127.0.0.1:0", "--script", script}
	if useTLS {
		args = append(args, "--tls")
	}
	cmd := exec.CommandContext(cctx, exe, args...)
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
	if f.url, f.roots, err = readListening(ctx, stdout, 10*time.Second); err != nil {
		f.close()
		return nil, fmt.Errorf("fake model: %w", err)
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }() // until the child exits
	return f, nil
}

// readListening reads r, the stdout of `ballet fake-llm`, until the line
// naming its URL, for at most timeout; roots holds the certificate printed
// before it when the fake serves TLS, and is nil otherwise.
func readListening(ctx context.Context, r io.Reader, timeout time.Duration) (url string, roots *x509.CertPool, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type listening struct {
		url   string
		roots *x509.CertPool
		err   error
	}
	found := make(chan listening, 1)
	go func() {
		defer close(found)
		var roots *x509.CertPool
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if b64, ok := strings.CutPrefix(sc.Text(), fakeLLMCertificate); ok {
				cert, err := parseFakeCertificate(b64)
				if err != nil {
					found <- listening{err: err}
					return
				}
				roots = x509.NewCertPool()
				roots.AddCert(cert)
			}
			if url, ok := strings.CutPrefix(sc.Text(), fakeLLMListening); ok {
				found <- listening{url: url, roots: roots}
				return
			}
		}
	}()
	select {
	case l, ok := <-found:
		switch {
		case !ok:
			return "", nil, errors.New("exited before listening")
		case l.err != nil:
			return "", nil, l.err
		case strings.HasPrefix(l.url, "https://") && l.roots == nil:
			return "", nil, errors.New("serves https without printing its certificate")
		}
		return l.url, l.roots, nil
	case <-ctx.Done():
		return "", nil, fmt.Errorf("not listening after %s", timeout)
	}
}

// parseFakeCertificate reads the certificate line of `ballet fake-llm --tls`.
func parseFakeCertificate(b64 string) (*x509.Certificate, error) {
	der, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("certificate line: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("certificate line: %w", err)
	}
	return cert, nil
}
