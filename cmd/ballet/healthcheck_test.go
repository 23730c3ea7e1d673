package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/store/storetest"
	"github.com/balletplanner/ballet/tasks/taskstest"
)

// TestHealthcheckAgainstARunningProcess: `ballet healthcheck` exits 0 when a
// running api's /readyz answers 200 — by default on the metrics listener of
// the configuration, or at --url — and 1 with the reason on stderr when
// nothing listens, the path is wrong or the process is not ready.
func TestHealthcheckAgainstARunningProcess(t *testing.T) {
	t.Parallel()
	rc := taskstest.Config(t)
	p := startProcess(t, []string{"BALLET_DATABASE_URL=" + storetest.URL(t), "BALLET_REDIS_URL=" + rc.URL,
		"BALLET_REDIS_NAMESPACE=" + rc.Namespace}, "api")
	p.waitReady(t)
	_, metricsPort, _ := net.SplitHostPort(p.metrics)

	notReady := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"status":"unavailable","redis":"connection refused"}`))
	}))
	t.Cleanup(notReady.Close)
	dead := freeAddr(t) // closed again: nothing listens there

	tests := []struct {
		name string
		env  []string
		args []string
		code int
		want string // in stdout on success, in stderr otherwise
	}{
		{"metrics listener from the config", []string{"BALLET_METRICS_ADDR=" + p.metrics}, nil, 0, "GET http://" + p.metrics + "/readyz: 200 OK"},
		{"wildcard metrics addr asked on loopback", []string{"BALLET_METRICS_ADDR=:" + metricsPort}, nil, 0, "GET http://127.0.0.1:" + metricsPort + "/readyz: 200 OK"},
		{"the server's port", nil, []string{"--url", "http://" + p.addr + "/readyz"}, 0, "200 OK"},
		{"a URL without a path gets /readyz", nil, []string{"--url", "http://" + p.addr}, 0, "GET http://" + p.addr + "/readyz: 200 OK"},
		{"dead port", nil, []string{"--url", "http://" + dead + "/readyz"}, 1, "connection refused"},
		{"dead port from the config", []string{"BALLET_METRICS_ADDR=" + dead}, nil, 1, "connection refused"},
		{"wrong path", nil, []string{"--url", "http://" + p.metrics + "/nope"}, 1, "404 Not Found"},
		{"not ready", nil, []string{"--url", notReady.URL + "/readyz"}, 1, `503 Service Unavailable: {"status":"unavailable","redis":"connection refused"}`},
		{"bad url", nil, []string{"--url", "localhost:9090"}, 2, "--url must be an http(s) URL"},
		{"placeholder key in the config", []string{"BALLET_METRICS_ADDR=" + p.metrics, "BALLET_GATEWAY_SIGNING_KEY=change-me-in-production"}, nil, 1, "gateway.signing_key: is a placeholder"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code := ballet(t, tt.env, append([]string{"healthcheck"}, tt.args...)...)
			got := stderr
			if tt.code == 0 {
				got = stdout
			}
			if code != tt.code || !strings.Contains(got, tt.want) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d and %q", code, stdout, stderr, tt.code, tt.want)
			}
		})
	}
}
