package main

import (
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/balletplanner/ballet/store/storetest"
	"github.com/balletplanner/ballet/tasks/taskstest"
)

// prlimitFiles is the command that runs a process with an open-file limit
// of n (util-linux's prlimit, part of every Debian system).
func prlimitFiles(t *testing.T, n int) []string {
	t.Helper()
	path, err := exec.LookPath("prlimit")
	if err != nil {
		t.Fatalf("prlimit (util-linux) is missing: %v", err)
	}
	return []string{path, fmt.Sprintf("--nofile=%d:%d", n, n)}
}

// At its open-file limit the api waits for a descriptor to free up and
// goes on accepting: the public port answers again once the idle sockets
// that took every descriptor are gone.
func TestTheAPIAcceptsAgainAfterRunningOutOfFiles(t *testing.T) {
	t.Parallel()
	const limit = 1200
	rc := taskstest.Config(t)
	p := startWrapped(t, []string{"BALLET_DATABASE_URL=" + storetest.URL(t), "BALLET_REDIS_URL=" + rc.URL,
		"BALLET_REDIS_NAMESPACE=" + rc.Namespace, "BALLET_DATABASE_MAX_CONNS=8", "BALLET_DATABASE_SEARCH_MAX_CONNS=2"}, prlimitFiles(t, limit), "api")
	p.waitReady(t)
	// More idle sockets than the api has descriptors: the last ones wait in
	// the kernel's backlog while its Accept fails with EMFILE.
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			_ = c.Close()
		}
	})
	for range limit + 100 {
		c, err := net.DialTimeout("tcp", p.addr, 5*time.Second)
		if err != nil {
			break // the backlog is full: the api is out of descriptors for sure
		}
		conns = append(conns, c)
	}
	storetest.WaitFor(t, "the api out of descriptors", func() bool {
		return strings.Contains(p.log(), "cannot accept a connection; waiting for a file descriptor to free up")
	})
	for _, c := range conns {
		_ = c.Close()
	}
	conns = nil
	client := &http.Client{Timeout: time.Second}
	storetest.WaitFor(t, "the public port to answer again", func() bool {
		res, err := client.Get("http://" + p.addr + "/healthz")
		if err != nil {
			return false
		}
		defer res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
	if !strings.Contains(p.log(), "accepting connections again") {
		t.Errorf("the api did not say it accepts again:\n%s", p.log())
	}
}

// A server.rpc_max_connections that cannot fit under the open-file limit
// is refused at start-up, with both figures.
func TestTheAPIRefusesMoreSocketsThanItsFileLimit(t *testing.T) {
	t.Parallel()
	rc := taskstest.Config(t)
	p := startWrapped(t, []string{"BALLET_DATABASE_URL=" + storetest.URL(t), "BALLET_REDIS_URL=" + rc.URL,
		"BALLET_REDIS_NAMESPACE=" + rc.Namespace, "BALLET_SERVER_RPC_MAX_CONNECTIONS=5000"}, prlimitFiles(t, 2000), "api")
	select {
	case err := <-p.done:
		p.done <- err // for the cleanup
		if err == nil {
			t.Fatal("the api started")
		}
	case <-time.After(storetest.WaitTimeout):
		t.Fatal("the api did not exit")
	}
	if out := p.log(); !strings.Contains(out, "server.rpc_max_connections: 5000 sockets") ||
		!strings.Contains(out, "over the process's limit of 2000 (RLIMIT_NOFILE)") {
		t.Fatalf("stderr lacks the reason:\n%s", out)
	}
}
