package tasks

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/balletplanner/ballet/internal/tracing"
	"github.com/balletplanner/ballet/store"
)

// publishCancelled publishes the done outputs of the turns a cancel ended
// while they were queued. While tracing is on, each turn that has a trace
// ends in it: a planner.cancel_queued span, a child of the turn's send and
// linked to the cancel that ended it (planner.cancel, or the interrupting
// planner.send), publishes the turn's outputs, so that its trace runs from
// the send to its done (and the api's fan-out of it) although no worker
// ever ran it.
func (p *Planner) publishCancelled(ctx context.Context, res store.CancelResult) {
	if !tracing.On() || len(res.Traces) == 0 {
		p.pub.Publish(ctx, res.Outputs...)
		return
	}
	outs := res.Outputs
	for len(outs) > 0 {
		n := 1
		for n < len(outs) && outs[n].Turn == outs[0].Turn {
			n++
		}
		tc := res.Traces[outs[0].Turn]
		if len(tc) == 0 {
			p.pub.Publish(tracing.Detach(ctx), outs[:n]...)
		} else {
			sctx, span := startCancelQueued(ctx, tracing.Carrier(tc), outs[:n])
			p.pub.Publish(sctx, outs[:n]...)
			span.End()
		}
		outs = outs[n:]
	}
}

// startCancelQueued starts the span that ends a queued turn, whose trace
// context is tc and whose last outputs are outs, in its own trace.
func startCancelQueued(ctx context.Context, tc tracing.Carrier, outs []store.Output) (context.Context, trace.Span) {
	parent := tracing.Extract(tracing.Detach(ctx), tc)
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)}
	if by := trace.SpanContextFromContext(ctx); by.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: by,
			Attributes: []attribute.KeyValue{attribute.String("ballet.link", "cancelled_by")}}))
	}
	sctx, span := tracer.Start(parent, "planner.cancel_queued", opts...)
	if span.IsRecording() {
		types := make([]string, len(outs))
		for i, o := range outs {
			types[i] = o.Type
		}
		span.SetAttributes(attribute.String("ballet.session", outs[0].Session), attribute.String("ballet.turn", outs[0].Turn),
			attribute.String("ballet.done_reason", store.ReasonCancelled), attribute.StringSlice("ballet.output.types", types))
	}
	return sctx, span
}
