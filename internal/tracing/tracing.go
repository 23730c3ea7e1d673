// Package tracing sets up OpenTelemetry traces for a ballet process, from
// the standard OTEL_* environment variables only, and carries a turn's
// trace context (W3C traceparent and tracestate) across the queue.
//
// With no OTLP endpoint set (or OTEL_SDK_DISABLED=true, or
// OTEL_TRACES_EXPORTER=none) tracing is off: the global tracer provider
// stays OpenTelemetry's no-op one, no exporter runs, and no trace context
// is read or written.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Protocols of OTEL_EXPORTER_OTLP_PROTOCOL (or _TRACES_PROTOCOL).
const (
	ProtocolHTTP = "http/protobuf"
	ProtocolGRPC = "grpc"
)

// Settings is what the OTEL_* variables say about traces.
type Settings struct {
	// Enabled is false when no trace is exported.
	Enabled bool
	// Protocol is ProtocolHTTP or ProtocolGRPC.
	Protocol string
	// Endpoint is the traces endpoint or the base endpoint, as given, for
	// the start log line; the exporters read the variables themselves.
	Endpoint string
}

// FromEnv reads the OTEL_* variables in environ (os.Environ's form).
// Tracing is on when OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, or OTEL_TRACES_EXPORTER is
// otlp; OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none turns it off.
// A protocol or exporter it cannot serve is an error.
func FromEnv(environ []string) (Settings, error) {
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "OTEL_") {
			env[k] = strings.TrimSpace(v)
		}
	}
	var s Settings
	switch exp := strings.ToLower(env["OTEL_TRACES_EXPORTER"]); exp {
	case "", "otlp":
		s.Enabled = exp == "otlp"
	case "none":
		return Settings{}, nil
	default:
		return Settings{}, fmt.Errorf("tracing: OTEL_TRACES_EXPORTER=%s: only otlp and none are supported", exp)
	}
	s.Endpoint = env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
	if s.Endpoint == "" {
		s.Endpoint = env["OTEL_EXPORTER_OTLP_ENDPOINT"]
	}
	s.Enabled = s.Enabled || s.Endpoint != ""
	if strings.EqualFold(env["OTEL_SDK_DISABLED"], "true") {
		return Settings{}, nil
	}
	s.Protocol = env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"]
	if s.Protocol == "" {
		s.Protocol = env["OTEL_EXPORTER_OTLP_PROTOCOL"]
	}
	switch s.Protocol {
	case "":
		s.Protocol = ProtocolHTTP
	case ProtocolHTTP, ProtocolGRPC:
	default:
		return Settings{}, fmt.Errorf("tracing: OTEL_EXPORTER_OTLP_PROTOCOL=%s: must be %s or %s", s.Protocol, ProtocolHTTP, ProtocolGRPC)
	}
	if !s.Enabled {
		return Settings{}, nil
	}
	return s, nil
}

// Tracing is a process's tracer provider; Stop flushes it.
type Tracing struct {
	settings Settings
	provider *sdktrace.TracerProvider // nil when off
}

// Start reads the OTEL_* variables of the process and, when tracing is on,
// installs a tracer provider exporting over OTLP and the W3C trace-context
// propagator as OpenTelemetry's globals. service names the process
// (ballet-<service>) unless OTEL_SERVICE_NAME does. When tracing is off it
// changes nothing.
func Start(ctx context.Context, service string) (*Tracing, error) {
	s, err := FromEnv(os.Environ())
	if err != nil {
		return nil, err
	}
	return StartWith(ctx, service, s)
}

// StartWith is Start with settings already read.
func StartWith(ctx context.Context, service string, s Settings) (*Tracing, error) {
	t := &Tracing{settings: s}
	if !s.Enabled {
		return t, nil
	}
	var exp sdktrace.SpanExporter
	var err error
	if s.Protocol == ProtocolGRPC {
		exp, err = otlptracegrpc.New(ctx)
	} else {
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: exporter: %w", err)
	}
	// Later detectors win: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
	// override the default name.
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "ballet-"+service)),
		resource.WithTelemetrySDK(), resource.WithProcessPID(), resource.WithHost(), resource.WithFromEnv())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	// The sampler is the SDK's default, or OTEL_TRACES_SAMPLER's.
	t.provider = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(t.provider)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	on.Store(true)
	return t, nil
}

// on is true once Start installed a tracer provider that exports.
var on atomic.Bool

// On reports whether this process exports spans: the instrumented code
// builds names and attributes only then.
func On() bool { return on.Load() }

// StartSpan starts a span of the kind named name, a child of ctx's span. While
// tracing is off it starts nothing and allocates nothing: it returns ctx
// and ctx's span as they are (a no-op one, whose End, SetAttributes and
// RecordError do nothing).
func StartSpan(ctx context.Context, t trace.Tracer, name string, kind trace.SpanKind) (context.Context, trace.Span) {
	if !on.Load() {
		return ctx, trace.SpanFromContext(ctx)
	}
	return t.Start(ctx, name, trace.WithSpanKind(kind))
}

// Enabled reports whether spans are exported.
func (t *Tracing) Enabled() bool { return t != nil && t.provider != nil }

// Settings is what Start read.
func (t *Tracing) Settings() Settings { return t.settings }

// Stop exports the spans still buffered (for up to timeout) and stops the
// exporter; nothing when tracing is off.
func (t *Tracing) Stop(timeout time.Duration) error {
	if !t.Enabled() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := t.provider.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: flush: %w", err)
	}
	return nil
}

// Tracer is the tracer of an instrumented package (its import path), from
// the global provider: the no-op one when tracing is off.
func Tracer(name string) trace.Tracer { return otel.Tracer(name) }

// Recording reports whether ctx holds a span being recorded: attributes
// that cost something to build are computed only then.
func Recording(ctx context.Context) bool { return trace.SpanFromContext(ctx).IsRecording() }

// EndSpan ends span, marking it failed with err when err is not nil.
func EndSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(otelcodes.Error, err.Error())
	}
	span.End()
}
