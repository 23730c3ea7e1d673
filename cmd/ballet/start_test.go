package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/store/storetest"
	"github.com/balletplanner/ballet/tasks/taskstest"
)

// TestStartWithUnreachableServices: a clear message, a non-zero exit, no
// panic and no stack trace.
func TestStartWithUnreachableServices(t *testing.T) {
	t.Parallel()
	dbURL := storetest.URL(t)
	tests := []struct {
		name string
		env  []string
		want string
	}{
		{"postgres", []string{"BALLET_DATABASE_URL=postgres://postgres@127.0.0.1:1/ballet?sslmode=disable", "BALLET_DATABASE_CONNECT_TIMEOUT=2s"},
			"postgres at 127.0.0.1:1/ballet is unreachable"},
		{"redis", []string{"BALLET_DATABASE_URL=" + dbURL, "BALLET_REDIS_URL=redis://127.0.0.1:1/0", "BALLET_REDIS_DIAL_TIMEOUT=1s"},
			"redis at 127.0.0.1:1 is unreachable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, cmd := range []string{"api", "worker"} {
				// A worker refuses to start without a signing key before it
				// connects to anything: give it one.
				_, stderr, code := ballet(t, append(slices.Clone(tt.env), "BALLET_GATEWAY_SIGNING_KEY=test-signing-key-0123456789abcdef"), cmd)
				if code != 1 {
					t.Fatalf("%s: exit %d, want 1; stderr %q", cmd, code, stderr)
				}
				if !strings.Contains(stderr, tt.want) {
					t.Fatalf("%s: stderr %q does not contain %q", cmd, stderr, tt.want)
				}
				if strings.Contains(stderr, "panic") || strings.Contains(stderr, "goroutine ") {
					t.Fatalf("%s: stack trace in %q", cmd, stderr)
				}
			}
		})
	}
}

func TestMigrateUpTwice(t *testing.T) {
	t.Parallel()
	env := []string{"BALLET_DATABASE_URL=" + storetest.EmptyURL(t)}
	out, stderr, code := ballet(t, env, "migrate", "up")
	if code != 0 || !strings.Contains(out, "applied") {
		t.Fatalf("first: exit %d, out %q, stderr %q", code, out, stderr)
	}
	out, stderr, code = ballet(t, env, "migrate", "up")
	if code != 0 || !strings.Contains(out, "up to date, nothing to apply") {
		t.Fatalf("second: exit %d, out %q, stderr %q", code, out, stderr)
	}
	out, _, code = ballet(t, env, "migrate", "status")
	if code != 0 || !strings.Contains(out, "applied") || strings.Contains(out, "pending") {
		t.Fatalf("status: exit %d, out %q", code, out)
	}
}

// TestServeAnswersReady starts `ballet serve` and waits for /readyz.
func TestServeAnswersReady(t *testing.T) {
	t.Parallel()
	rc := taskstest.Config(t)
	env := []string{"BALLET_DATABASE_URL=" + storetest.URL(t), "BALLET_REDIS_URL=" + rc.URL,
		"BALLET_REDIS_NAMESPACE=" + rc.Namespace}
	p := startProcess(t, env, "serve")
	p.waitReady(t)
	body := p.scrape(t, "")
	if !strings.Contains(body, `ballet_build_info{service="serve",version="dev"} 1`) {
		t.Fatalf("no build info in metrics:\n%s", body)
	}
	p.stop(t)
}
