package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

// With tracing off (no OTEL_* set, as in these tests) a send's trace
// context, well formed or not, is neither refused nor kept: the turn
// stores none, and the REST send answers as without it.
func TestSendWithTracingOffKeepsNoTraceContext(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.restart(t, withLimits(10))
	sess := e.do("POST", "/api/v1/projects/WEB/planner/sessions", "engineer", map[string]any{"title": "p"}).expect(t, 201).Body["id"].(string)
	tests := []struct{ name, traceparent string }{
		{"valid", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		{"malformed: ignored as W3C says", "00-nope-01"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest("POST", "http://"+e.srv.Addr()+"/api/v1/planner/sessions/"+sess+"/messages", strings.NewReader(`{"text":"x"}`))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+e.tokens["engineer"])
			req.Header.Set("traceparent", tt.traceparent)
			req.Header.Set("tracestate", "vendor=abc")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusAccepted {
				t.Fatalf("status %d, want 202", res.StatusCode)
			}
			var n int
			if err := e.db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM planner_turns
				WHERE session_id = $1 AND trace_context IS NOT NULL`, sess).Scan(&n); err != nil || n != 0 {
				t.Fatalf("%d turns keep a trace context (%v), want none with tracing off", n, err)
			}
		})
	}
}
