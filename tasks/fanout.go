package tasks

import (
	"context"
	"encoding/json"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/balletplanner/ballet/internal/tracing"
	"github.com/balletplanner/ballet/store"
)

// A stored output published while tracing is on carries the trace context
// of the span that published it (the worker's planner.publish, the api's
// planner.send or a queued turn's planner.cancel_queued) as two more JSON
// members, "traceparent" and "tracestate", after the output's own. A hub
// that receives one fans it out in a planner.fanout span of that trace.
// While tracing is off nothing is added to the message and no span is
// started; the subscribers that decode an output ignore the members.

// traceMembers are the trace members of a published output.
type traceMembers struct {
	Traceparent string `json:"traceparent,omitempty"`
	Tracestate  string `json:"tracestate,omitempty"`
}

// published is a stored output as the hub receives it.
type published struct {
	store.Output
	traceMembers
}

// traceFields are the JSON members (each after a comma) that carry the
// trace context of ctx's span in a published output; nil while tracing is
// off or ctx holds no span.
func traceFields(ctx context.Context) []byte {
	if !tracing.On() {
		return nil
	}
	c := tracing.Inject(ctx)
	if c == nil {
		return nil
	}
	b, err := json.Marshal(traceMembers{Traceparent: c["traceparent"], Tracestate: c["tracestate"]})
	if err != nil || len(b) < 2 {
		return nil
	}
	// {"traceparent":…} → ,"traceparent":…
	b[0] = ','
	return b[:len(b)-1]
}

// startFanout starts the span of the hub's fan-out of a published output
// to the watchers of channel, in the trace the output carries; a no-op
// span when tracing is off or the output carries none.
func startFanout(p *published, channel string) trace.Span {
	if !tracing.On() || p.Traceparent == "" {
		return trace.SpanFromContext(context.Background())
	}
	c := tracing.Carrier{"traceparent": p.Traceparent}
	if p.Tracestate != "" {
		c["tracestate"] = p.Tracestate
	}
	parent := tracing.Extract(context.Background(), c)
	if !trace.SpanContextFromContext(parent).IsValid() {
		return trace.SpanFromContext(context.Background())
	}
	_, span := tracer.Start(parent, "planner.fanout", trace.WithSpanKind(trace.SpanKindConsumer))
	if span.IsRecording() {
		span.SetAttributes(attribute.String("messaging.system", "redis"),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.destination.name", channel),
			attribute.String("ballet.session", p.Session), attribute.String("ballet.turn", p.Turn),
			attribute.String("ballet.output.type", p.Type), attribute.Int64("ballet.cursor", p.Cursor))
	}
	return span
}

// endFanout ends a fan-out's span with how many watchers the output was
// queued for and how many were dropped as lagging.
func endFanout(span trace.Span, watchers, lagging int) {
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("ballet.watchers", watchers), attribute.Int("ballet.lagging", lagging))
	}
	span.End()
}
