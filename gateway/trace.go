package gateway

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/balletplanner/ballet/internal/tracing"
)

// A model call's spans in the gateway: gateway.messages (the whole call,
// a child of the caller's span when it sent a traceparent) holds
// gateway.reserve (the budget and rate-limit reservation), gateway.upstream
// (each try of the upstream call, whose request carries the trace on),
// gateway.relay (the answer streamed to the caller) and gateway.meter (the
// settlement and the usage row). While tracing is off no span is started;
// a traceparent that came is still passed on when a propagator is set.

// tracer makes the gateway's spans.
var tracer = tracing.Tracer("github.com/balletplanner/ballet/gateway")

// startMessages starts the span of one POST /v1/messages, in the caller's
// trace, and returns the request carrying it.
func startMessages(r *http.Request) (*http.Request, trace.Span) {
	ctx := tracing.ExtractHeaders(r.Context(), r.Header)
	ctx, span := tracing.StartSpan(ctx, tracer, "gateway.messages", trace.SpanKindServer)
	if !span.SpanContext().IsValid() {
		return r, span // tracing off and no trace came: nothing to carry on
	}
	if span.IsRecording() {
		span.SetAttributes(semconv.HTTPRequestMethodPost, semconv.URLPath(r.URL.Path))
	}
	return r.WithContext(ctx), span
}

// endMessages ends the call's span with what the caller was answered.
func endMessages(span trace.Span, mc *messageCall, status int) {
	if span.IsRecording() {
		span.SetAttributes(semconv.HTTPResponseStatusCode(status))
		if mc != nil {
			span.SetAttributes(semconv.GenAIOperationNameChat, semconv.GenAIRequestModel(mc.model),
				attribute.String("gen_ai.provider.name", mc.provider), attribute.String("ballet.request_id", mc.reqID))
		}
	}
	var err error
	if status >= 500 {
		err = errStatus(status)
	}
	tracing.EndSpan(span, err)
}

// startUpstream starts the span of one try of an upstream call and puts
// the trace context on its request.
func startUpstream(ctx context.Context, req *http.Request, provider string) trace.Span {
	span := trace.SpanFromContext(ctx)
	if tracing.On() {
		ctx, span = tracer.Start(ctx, "gateway.upstream "+provider, trace.WithSpanKind(trace.SpanKindClient))
	}
	if span.IsRecording() {
		span.SetAttributes(attribute.String("gen_ai.provider.name", provider), semconv.ServerAddress(req.URL.Hostname()),
			semconv.URLFull(req.URL.Redacted()))
	}
	tracing.InjectHeaders(ctx, req.Header)
	return span
}

// errStatus is a failed call's status as an error, for its span.
type errStatus int

func (e errStatus) Error() string { return http.StatusText(int(e)) }
