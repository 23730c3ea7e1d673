package store_test

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/balletplanner/ballet/store"
)

// A turn keeps the trace context of its send; each claim reads it with
// the span context of the attempt before, which only the lease holder
// may set; a turn sent without one keeps none.
func TestTurnKeepsItsTraceContext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newTrackerFixture(t)
	s, err := f.db.CreateSession(ctx, f.engineer, "WEB", "plan")
	if err != nil {
		t.Fatal(err)
	}
	sent := map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate": "v=1"}
	res, err := f.db.Send(ctx, f.engineer, store.SendRequest{Session: s.ID, Text: "what next?", TraceContext: sent}, store.QueueLimits{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := f.db.ClaimTurn(ctx, res.Turn, "w1", time.Minute)
	if err != nil || c.State != store.ClaimRun {
		t.Fatalf("claim: %v, state %v", err, c.State)
	}
	if !maps.Equal(c.Trace.Context, sent) || c.Trace.LastAttempt != nil || c.Trace.WaitingFrom.IsZero() {
		t.Fatalf("first claim read %+v, want the send's context, no attempt and a wait start", c.Trace)
	}
	first := map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-1111111111111111-01"}
	if err := f.db.SetAttemptTrace(ctx, c.Fence, first); err != nil {
		t.Fatal(err)
	}
	if err := f.db.HandBack(ctx, c.Fence); err != nil {
		t.Fatal(err)
	}
	c2, err := f.db.ClaimTurn(ctx, res.Turn, "w2", time.Minute)
	if err != nil || c2.State != store.ClaimRun {
		t.Fatalf("second claim: %v, state %v", err, c2.State)
	}
	if !maps.Equal(c2.Trace.LastAttempt, first) || !maps.Equal(c2.Trace.Context, sent) {
		t.Fatalf("second claim read %+v, want the first attempt's span context", c2.Trace)
	}
	// The first worker, whose lease was taken over, writes nothing.
	stale := map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-2222222222222222-01"}
	if err := f.db.SetAttemptTrace(ctx, c.Fence, stale); err != nil {
		t.Fatal(err)
	}
	var kept map[string]string
	if err := f.db.Pool().QueryRow(ctx, `SELECT attempt_trace_context FROM planner_turns WHERE id = $1`, res.Turn).Scan(&kept); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(kept, first) {
		t.Fatalf("attempt trace context %v after a stale fence's write, want %v", kept, first)
	}
	// Sent without one (tracing off): nothing kept.
	c3, _ := f.claimed(t, "w3")
	if c3.Trace.Context != nil || c3.Trace.LastAttempt != nil {
		t.Fatalf("a turn sent without a trace context reads %+v", c3.Trace)
	}
}
