package gateway

import (
	"context"
	"net/http"
	"strconv"
	"testing"

	"github.com/balletplanner/ballet/gateway/fakellm"
	"github.com/balletplanner/ballet/store"
)

// histogramCount is the number of observations of a histogram of the env's
// registry with these labels.
func (e *env) histogramCount(t testing.TB, name string, labels map[string]string) uint64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				if matches(m, labels) {
					n += m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return n
}

// TestRefusalsCounted: every 401, 403 and 429 the gateway gives is counted
// once under its reason, and as an HTTP request of its route pattern.
func TestRefusalsCounted(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		limits *store.Limits
		calls  int // calls before the refused one, which succeed
		token  bool
		status int
		reason string
	}{
		{"no token", nil, 0, false, http.StatusUnauthorized, "unauthenticated"},
		{"rate limit", &store.Limits{RequestsPerMinute: int64p(1)}, 1, true, http.StatusTooManyRequests, "rate_limit"},
		// A call whose input may not fit in what remains of a budget is refused.
		{"budget", &store.Limits{TokenBudget: int64p(1), BudgetPeriod: store.BudgetDay}, 0, true, http.StatusForbidden, "budget"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, fakellm.MustParse(okScript))
			if tt.limits != nil {
				l := *tt.limits
				l.OrganizationID, l.ProjectID, l.UpdatedBy = e.org, e.project, "alice"
				if _, err := e.db.PutLimits(context.Background(), l); err != nil {
					t.Fatal(err)
				}
			}
			token := ""
			if tt.token {
				token = e.token(t)
			}
			for i := range tt.calls {
				if resp, body := e.post(t, token, hello(false)); resp.StatusCode != http.StatusOK {
					t.Fatalf("call %d: %d %s", i, resp.StatusCode, body)
				}
			}
			if resp, body := e.post(t, token, hello(false)); resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, body)
			}
			for _, r := range refusalReasons {
				want := 0.0
				if r == tt.reason {
					want = 1
				}
				if got := e.counter(t, "ballet_llm_refusals_total", map[string]string{"reason": r}); got != want {
					t.Errorf("refusals{reason=%q} = %v, want %v", r, got, want)
				}
			}
			labels := map[string]string{"service": "gateway", "route": "POST /v1/messages", "method": "POST", "status": strconv.Itoa(tt.status)}
			if got := e.counter(t, "ballet_http_requests_total", labels); got != 1 {
				t.Errorf("http requests %v = %v, want 1", labels, got)
			}
		})
	}
}

// TestGatewayHTTPAndUpstreamMetrics: a streamed and a JSON call are counted
// under the mux's route pattern, each timed once upstream (duration and
// time to first byte, by provider); a path no route takes is "unmatched",
// never the raw path.
func TestGatewayHTTPAndUpstreamMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakellm.MustParse(okScript))
	token := e.token(t)
	for _, stream := range []bool{false, true} {
		if resp, body := e.post(t, token, hello(stream)); resp.StatusCode != http.StatusOK {
			t.Fatalf("stream=%v: %d %s", stream, resp.StatusCode, body)
		}
	}
	if resp, _ := e.send(t, http.MethodGet, "/v1/no/such/route", token, nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown route: %d", resp.StatusCode)
	}
	for _, tt := range []struct {
		labels map[string]string
		want   float64
	}{
		{map[string]string{"service": "gateway", "route": "POST /v1/messages", "method": "POST", "status": "200"}, 2},
		{map[string]string{"service": "gateway", "route": "unmatched", "method": "GET", "status": "404"}, 1},
	} {
		if got := e.counter(t, "ballet_http_requests_total", tt.labels); got != tt.want {
			t.Errorf("http requests %v = %v, want %v", tt.labels, got, tt.want)
		}
	}
	if got := e.histogramCount(t, "ballet_http_request_duration_seconds", map[string]string{"route": "POST /v1/messages"}); got != 2 {
		t.Errorf("request durations = %d, want 2", got)
	}
	for _, name := range []string{"ballet_llm_upstream_duration_seconds", "ballet_llm_upstream_ttfb_seconds"} {
		if got := e.histogramCount(t, name, map[string]string{"provider": store.ProviderAnthropic}); got != 2 {
			t.Errorf("%s count = %d, want 2", name, got)
		}
	}
}

// TestRefusalReason names each refusal the gateway gives from its answer.
func TestRefusalReason(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status int
		body   string
		want   string
	}{
		{401, `{"type":"error","error":{"type":"authentication_error","message":"missing token"}}`, "unauthenticated"},
		{403, `{"error":{"type":"permission_error","message":"the token lacks the llm.invoke capability"}}`, "forbidden"},
		{403, `{"error":{"message":"no provider credential for project DEMO or its organization acme"}}`, "no_credential"},
		{403, `{"error":{"code":"no_credential","message":"no embeddings credential"}}`, "no_credential"},
		{403, `{"error":{"message":"the anthropic credential of project DEMO has a base_url that is not allowed: …"}}`, "upstream_not_allowed"},
		{403, `{"error":{"message":"token budget spent: project DEMO has used 10 of its 1 tokens this day"}}`, "budget"},
		{429, `{"error":{"message":"rate limit exceeded: project DEMO allows 1 requests per minute"}}`, "rate_limit"},
		{429, `{"error":{"message":"upstream anthropic answered 429 Too Many Requests"}}`, "upstream"},
	}
	for _, tt := range tests {
		if got := refusalReason(tt.status, []byte(tt.body)); got != tt.want {
			t.Errorf("refusalReason(%d, %s) = %s, want %s", tt.status, tt.body, got, tt.want)
		}
	}
}
