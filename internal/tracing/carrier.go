package tracing

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Carrier is a trace context as its W3C headers (traceparent and, when
// set, tracestate), as a turn keeps it in Postgres and in its task
// payload. nil when tracing is off or ctx held no span.
type Carrier map[string]string

// Inject returns the trace context of ctx's span; nil when there is none
// to carry (tracing off: the propagator is the no-op one).
func Inject(ctx context.Context) Carrier {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	c := Carrier{}
	otel.GetTextMapPropagator().Inject(ctx, propagation.MapCarrier(c))
	if len(c) == 0 {
		return nil
	}
	return c
}

// Extract returns ctx with the remote span context c carries as the parent
// of the spans started in it; ctx as it is when c is empty or malformed.
func Extract(ctx context.Context, c Carrier) context.Context {
	if len(c) == 0 {
		return ctx
	}
	return otel.GetTextMapPropagator().Extract(ctx, propagation.MapCarrier(c))
}

// Detach returns ctx without its span, so that what is started or carried
// from it belongs to no trace; ctx itself when it holds none.
func Detach(ctx context.Context) context.Context {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	return trace.ContextWithSpanContext(ctx, trace.SpanContext{})
}

// SpanContext is the span context c carries; an invalid one when none.
func SpanContext(c Carrier) trace.SpanContext {
	if len(c) == 0 {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(c)))
}

// FromHeaders is Extract from HTTP request headers: a client's
// traceparent and tracestate.
func FromHeaders(ctx context.Context, get func(key string) string) context.Context {
	return otel.GetTextMapPropagator().Extract(ctx, headerGetter(get))
}

// ExtractHeaders is Extract from a net/http request's headers.
func ExtractHeaders(ctx context.Context, h http.Header) context.Context {
	return otel.GetTextMapPropagator().Extract(ctx, propagation.HeaderCarrier(h))
}

// InjectHeaders sets the traceparent (and tracestate) of ctx's span on h.
func InjectHeaders(ctx context.Context, h http.Header) {
	otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(h))
}

// headerGetter reads a request's headers through a getter, for servers
// whose requests are not net/http ones (fasthttp).
type headerGetter func(key string) string

func (g headerGetter) Get(key string) string { return g(key) }
func (g headerGetter) Set(string, string)    {}
func (g headerGetter) Keys() []string        { return nil }
