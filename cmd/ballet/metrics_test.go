package main

import (
	"bytes"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
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
				"BALLET_GATEWAY_SIGNING_KEY=test-signing-key-0123456789abcdef", "BALLET_METRICS_TOKEN=" + tt.token}
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

// TestServeMetricsAddUp: one `ballet serve` process (api, worker and gateway)
// exports each metric family once and each series once; a turn counts once;
// the HTTP series carry route patterns, the gateway's refusals and upstream
// timings show; series that start at 0 are there before anything happens;
// and `promtool check metrics` finds nothing.
func TestServeMetricsAddUp(t *testing.T) {
	t.Parallel()
	p, token, _ := startDemoServe(t, "demo")
	c := client{t: t, base: "http://" + p.addr + "/api/v1", token: token}
	before := p.scrape(t, "")
	for _, want := range []string{`ballet_planner_compactions_total{outcome="ok"} 0`, `ballet_planner_compactions_total{outcome="failed"} 0`,
		`ballet_planner_turns_total{outcome="completed"} 0`, `ballet_llm_refusals_total{reason="budget"} 0`,
		`ballet_planner_turn_duration_seconds_bucket{le="1800"} 0`, "ballet_rpc_connections 0",
		`ballet_llm_budgets{state="exhausted"} 0`, `ballet_llm_upstream_retries_total{provider="anthropic"} 0`} {
		if !strings.Contains(before, want) {
			t.Errorf("metrics at start lack %s", want)
		}
	}
	// server.rpc_max_connections 0: 20,000, or what the open-file limit leaves.
	if !regexp.MustCompile(`\nballet_rpc_connections_limit [1-9][0-9]*\n`).MatchString(before) {
		t.Errorf("metrics at start lack ballet_rpc_connections_limit")
	}
	checkMetricsText(t, before)

	var sess struct{ ID string }
	if s := c.do("POST", "/projects/DEMO/planner/sessions", map[string]any{"title": "Metrics"}, &sess); s != 201 {
		t.Fatalf("create session: %d", s)
	}
	if s := c.do("POST", "/planner/sessions/"+sess.ID+"/messages", map[string]any{"text": "What should we plan?"}, nil); s != 202 {
		t.Fatalf("send: %d", s)
	}
	if !storetest.Poll(storetest.WaitTimeout, func() bool {
		return p.metric(t, `ballet_planner_turns_total{outcome="completed"}`) == 1
	}) {
		t.Fatalf("the turn never counted as completed:\n%s", p.log())
	}
	if status, _ := fetch(t, "http://"+p.addr+"/api/v1/no/such/route", token); status != http.StatusNotFound {
		t.Errorf("unknown api route: %d, want 404", status)
	}
	gw := envValue(p, "BALLET_GATEWAY_ADDR=")
	res, err := http.Post("http://"+gw+"/v1/messages", "application/json", strings.NewReader(`{}`))
	must(t, err)
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Errorf("gateway call without a token: %d, want 401", res.StatusCode)
	}

	// The api answers before it counts: wait for the last request to show.
	var body string
	if !storetest.Poll(storetest.WaitTimeout, func() bool {
		body = p.scrape(t, "")
		return strings.Contains(body, `ballet_http_requests_total{method="GET",route="unmatched",service="api",status="404"} 1`) &&
			strings.Contains(body, `ballet_llm_refusals_total{reason="unauthenticated"} 1`)
	}) {
		t.Fatalf("the last requests never counted:\n%s", body)
	}
	for _, want := range []string{
		`ballet_planner_turns_total{outcome="completed"} 1`,
		"ballet_planner_turn_duration_seconds_count 1",
		"ballet_planner_queue_wait_seconds_count 1",
		`ballet_http_requests_total{method="POST",route="/api/v1/planner/sessions/:session/messages",service="api",status="202"} 1`,
		`ballet_http_request_duration_seconds_count{method="POST",route="/api/v1/planner/sessions/:session/messages",service="api"} 1`,
		`ballet_http_requests_total{method="POST",route="POST /v1/messages",service="gateway",status="200"}`,
		`ballet_http_requests_total{method="POST",route="POST /v1/messages",service="gateway",status="401"} 1`,
		`ballet_llm_upstream_duration_seconds_count{provider="anthropic"}`,
		`ballet_llm_upstream_ttfb_seconds_count{provider="anthropic"}`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// One model call per round, each one gateway request and one upstream attempt.
	calls := sample(t, body, `ballet_http_requests_total{method="POST",route="POST /v1/messages",service="gateway",status="200"}`)
	for _, series := range []string{`ballet_llm_upstream_duration_seconds_count{provider="anthropic"}`,
		`ballet_llm_upstream_ttfb_seconds_count{provider="anthropic"}`} {
		if got := sample(t, body, series); got != calls || calls == 0 {
			t.Errorf("%s = %v, want %v (the gateway's 200 answers)", series, got, calls)
		}
	}
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "ballet_http_request") && strings.Contains(line, "/no/such/route") {
			t.Errorf("a raw path became a label: %s", line)
		}
	}
	checkMetricsText(t, body)
	p.stop(t)
}

// envValue is the value the process was started with for key ("NAME=").
func envValue(p *process, key string) string {
	v := ""
	for _, e := range p.cmd.Env {
		if s, ok := strings.CutPrefix(e, key); ok {
			v = s // the last one wins, as in the process
		}
	}
	return v
}

// sample is the value of one series line of a scrape, 0 when absent.
func sample(t *testing.T, body, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			must(t, err)
			return f
		}
	}
	return 0
}

// checkMetricsText fails t when a metric family or a series appears twice
// in a scrape, or when `promtool check metrics` reports anything.
func checkMetricsText(t *testing.T, body string) {
	t.Helper()
	families, series := map[string]int{}, map[string]int{}
	for _, line := range strings.Split(body, "\n") {
		switch {
		case strings.HasPrefix(line, "# TYPE "):
			families[strings.Fields(line)[2]]++
		case line == "" || strings.HasPrefix(line, "#"):
		default:
			series[line[:strings.LastIndexByte(line, ' ')]]++
		}
	}
	for name, n := range families {
		if n > 1 {
			t.Errorf("metric family %s exported %d times", name, n)
		}
	}
	for s, n := range series {
		if n > 1 {
			t.Errorf("series %s exported %d times", s, n)
		}
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool is not installed (Debian's prometheus package): `make test` installs it: %v", err)
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}
