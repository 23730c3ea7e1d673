package main

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/store/storetest"
	"github.com/balletplanner/ballet/tasks/taskstest"
)

// fetch GETs url with an optional bearer token and returns the status and
// body; a transport error fails t.
func fetch(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// scrape reads /metrics from the process's metrics listener, as Prometheus
// does, with token when one is configured.
func (p *process) scrape(t *testing.T, token string) string {
	t.Helper()
	status, body := fetch(t, "http://"+p.metrics+"/metrics", token)
	if status != http.StatusOK {
		t.Fatalf("scrape %s: %d %s", p.metrics, status, body)
	}
	return body
}

// TestMetricsOnlyOnTheMetricsListener: every process serves its metrics on
// metrics.addr only (one process, one scrape target); the public api and
// gateway ports and a worker's health port answer /metrics with 404, and a
// set metrics.token is required.
func TestMetricsOnlyOnTheMetricsListener(t *testing.T) {
	t.Parallel()
	const token = "scrape-token-0123456789"
	tests := []struct {
		command string
		token   string
	}{
		{"serve", ""},
		{"serve", token},
		{"worker", ""},
	}
	for _, tt := range tests {
		t.Run(tt.command+map[bool]string{true: "_with_token", false: ""}[tt.token != ""], func(t *testing.T) {
			t.Parallel()
			rc := taskstest.Config(t)
			gw := freeAddr(t)
			env := []string{"BALLET_DATABASE_URL=" + storetest.URL(t), "BALLET_REDIS_URL=" + rc.URL,
				"BALLET_REDIS_NAMESPACE=" + rc.Namespace, "BALLET_GATEWAY_ADDR=" + gw,
				"BALLET_GATEWAY_SIGNING_KEY=test-signing-key", "BALLET_METRICS_TOKEN=" + tt.token}
			p := startProcess(t, env, tt.command)
			p.waitReady(t)
			public := []string{p.addr}
			if tt.command == "serve" {
				public = append(public, gw)
			}
			for _, addr := range public {
				if status, body := fetch(t, "http://"+addr+"/metrics", tt.token); status != http.StatusNotFound {
					t.Errorf("GET /metrics on the public port %s: %d, want 404; body %.200s", addr, status, body)
				}
			}
			if tt.token != "" {
				for _, bad := range []string{"", "wrong-token-0123456789"} {
					status, body := fetch(t, "http://"+p.metrics+"/metrics", bad)
					if status != http.StatusUnauthorized || !strings.Contains(body, "metrics.token") {
						t.Errorf("scrape with token %q: %d %s, want 401 naming metrics.token", bad, status, body)
					}
				}
			}
			body := p.scrape(t, tt.token)
			want := `ballet_build_info{service="` + tt.command + `",version="dev"} 1`
			if strings.Count(body, "ballet_build_info{") != 1 || !strings.Contains(body, want) {
				t.Errorf("metrics lack %s exactly once:\n%.2000s", want, body)
			}
			for _, path := range []string{"/healthz", "/readyz"} {
				if status, body := fetch(t, "http://"+p.metrics+path, ""); status != http.StatusOK {
					t.Errorf("GET %s on the metrics listener: %d %s", path, status, body)
				}
			}
			p.stop(t)
		})
	}
}
