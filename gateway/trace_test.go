package gateway

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/balletplanner/ballet/gateway/fakellm"
)

// The trace a worker's call carries goes on to the upstream: the client
// sends its traceparent, the gateway continues it, and the upstream's
// request carries the same trace. (With the W3C propagator alone, as in
// a process whose spans are not exported, the ids pass through as they
// came; TestTurnIsOneTraceAcrossProcessesAndAResume in cmd/ballet checks
// the exported spans.)
func TestUpstreamRequestCarriesTheCallersTrace(t *testing.T) {
	t.Parallel()
	// The propagator is a process global: a request without a traceparent,
	// as every other test's, is untouched by it.
	otel.SetTextMapPropagator(propagation.TraceContext{})
	e := newEnv(t, fakellm.MustParse(okScript))
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	tests := []struct {
		name   string
		stream bool
	}{{"json", false}, {"stream", true}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(e.fake.Requests())
			if tt.stream {
				s, err := e.client.Stream(ctx, e.principal(), hello(true))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := s.Collect(nil); err != nil {
					t.Fatal(err)
				}
			} else if _, err := e.client.Create(ctx, e.principal(), hello(false)); err != nil {
				t.Fatal(err)
			}
			reqs := e.fake.Requests()
			if len(reqs) != before+1 {
				t.Fatalf("%d upstream requests, want 1", len(reqs)-before)
			}
			got := reqs[len(reqs)-1].Header.Get("traceparent")
			if !strings.HasPrefix(got, "00-4bf92f3577b34da6a3ce929d0e0e4736-") || !strings.HasSuffix(got, "-01") {
				t.Fatalf("upstream traceparent %q, want the caller's trace", got)
			}
		})
	}
}
