package tracing_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/balletplanner/ballet/internal/tracing"
)

func TestFromEnv(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		env     []string
		want    tracing.Settings
		wantErr string
	}{
		{name: "nothing set: off", env: []string{"PATH=/bin", "BALLET_LOG_LEVEL=info"}},
		{name: "sampler alone: off", env: []string{"OTEL_TRACES_SAMPLER=always_on", "OTEL_SERVICE_NAME=x"}},
		{name: "endpoint: http/protobuf", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://c:4318"},
			want: tracing.Settings{Enabled: true, Protocol: "http/protobuf", Endpoint: "http://c:4318"}},
		{name: "traces endpoint wins", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://c:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://t:4318/v1/traces"},
			want: tracing.Settings{Enabled: true, Protocol: "http/protobuf", Endpoint: "http://t:4318/v1/traces"}},
		{name: "grpc", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL=grpc"},
			want: tracing.Settings{Enabled: true, Protocol: "grpc", Endpoint: "http://c:4317"}},
		{name: "traces protocol wins", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
			"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=grpc"}, want: tracing.Settings{Enabled: true, Protocol: "grpc", Endpoint: "http://c:4317"}},
		{name: "exporter otlp without endpoint: the SDK's default", env: []string{"OTEL_TRACES_EXPORTER=otlp"},
			want: tracing.Settings{Enabled: true, Protocol: "http/protobuf"}},
		{name: "sdk disabled", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://c:4318", "OTEL_SDK_DISABLED=true"}},
		{name: "exporter none", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://c:4318", "OTEL_TRACES_EXPORTER=none"}},
		{name: "http/json refused", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://c:4318", "OTEL_EXPORTER_OTLP_PROTOCOL=http/json"},
			wantErr: "tracing: OTEL_EXPORTER_OTLP_PROTOCOL=http/json: must be http/protobuf or grpc"},
		{name: "zipkin refused", env: []string{"OTEL_TRACES_EXPORTER=zipkin"},
			wantErr: "tracing: OTEL_TRACES_EXPORTER=zipkin: only otlp and none are supported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := tracing.FromEnv(tt.env)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("FromEnv = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

// With no OTEL_* set, Start runs no exporter: the global tracer provider
// stays the no-op one, spans record nothing, and no trace context is
// carried.
func TestStartWithNothingSetRunsNoExporter(t *testing.T) {
	t.Parallel()
	s, err := tracing.FromEnv(nil)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := tracing.StartWith(context.Background(), "api", s)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Enabled() {
		t.Fatal("tracing is on with nothing set")
	}
	if tp, ok := otel.GetTracerProvider().(*sdktrace.TracerProvider); ok {
		t.Fatalf("an SDK tracer provider (%p), with its exporter, is installed with nothing set", tp)
	}
	ctx, span := tracing.Tracer("test").Start(context.Background(), "x")
	defer span.End()
	if span.IsRecording() || span.SpanContext().IsValid() {
		t.Fatalf("span records (%v) or has a context (%v) with tracing off", span.IsRecording(), span.SpanContext())
	}
	if c := tracing.Inject(ctx); c != nil {
		t.Fatalf("carried %v with tracing off", c)
	}
	if err := tr.Stop(time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestLogHandlerAddsTraceAndSpanIDs(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(tracing.NewLogHandler(slog.NewJSONHandler(&buf, nil))).With(slog.String("service", "worker"))
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	log.InfoContext(ctx, "in a span")
	log.InfoContext(context.Background(), "outside")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("log %q", buf.String())
	}
	if !strings.Contains(lines[0], `"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","span_id":"00f067aa0ba902b7"`) {
		t.Fatalf("line in a span lacks its ids: %s", lines[0])
	}
	if strings.Contains(lines[1], "trace_id") {
		t.Fatalf("line outside a span has a trace id: %s", lines[1])
	}
}

// While tracing is off, what a turn calls on its way allocates nothing:
// starting and ending a span, carrying the trace context in and out. (Not
// parallel: AllocsPerRun counts the whole process's allocations.)
func TestOffAllocatesNothing(t *testing.T) {
	if tracing.On() {
		t.Fatal("tracing is on in a test that never started it")
	}
	tr := tracing.Tracer("test")
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		sctx, span := tracing.StartSpan(ctx, tr, "planner.send", trace.SpanKindServer)
		if span.IsRecording() {
			t.Fatal("recording")
		}
		if tracing.Inject(sctx) != nil {
			t.Fatal("carried")
		}
		_ = tracing.Detach(tracing.Extract(sctx, nil))
		tracing.EndSpan(span, nil)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per span with tracing off, want 0", allocs)
	}
}
