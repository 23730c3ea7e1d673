// Package otlptest is an OTLP trace receiver for tests: it serves
// OTLP/HTTP (protobuf, on /v1/traces) and OTLP/gRPC, decodes each export
// with the official protobuf types and keeps the spans, so that a test
// sees what a collector would.
package otlptest

import (
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, flattened.
type Span struct {
	// Service and PID are the exporting process's service.name and
	// process.pid resource attributes.
	Service  string
	PID      int64
	Name     string
	Kind     tracepb.Span_SpanKind
	TraceID  string
	SpanID   string
	ParentID string // "" for a root span
	// Attrs holds the span's attributes as text (arrays as their values
	// joined by commas).
	Attrs  map[string]string
	Links  []Link
	Status tracepb.Status_StatusCode
	// Start and End are Unix nanoseconds.
	Start, End uint64
}

// Link is a span link.
type Link struct {
	TraceID, SpanID string
	Attrs           map[string]string
}

// Receiver keeps what it was sent.
type Receiver struct {
	collectorpb.UnimplementedTraceServiceServer

	mu    sync.Mutex
	spans []Span

	httpAddr, grpcAddr string
}

// Start starts a receiver serving OTLP/HTTP and OTLP/gRPC on ports of
// its own, stopped when the test ends.
func Start(t testing.TB) *Receiver {
	t.Helper()
	r := &Receiver{}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.httpAddr, r.grpcAddr = hl.Addr().String(), gl.Addr().String()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", r.serveHTTP)
	hs := &http.Server{Handler: mux}
	gs := grpc.NewServer()
	collectorpb.RegisterTraceServiceServer(gs, r)
	go func() { _ = hs.Serve(hl) }()
	go func() { _ = gs.Serve(gl) }()
	t.Cleanup(func() {
		_ = hs.Close()
		gs.Stop()
	})
	return r
}

// HTTPEndpoint is the OTLP/HTTP base URL (OTEL_EXPORTER_OTLP_ENDPOINT).
func (r *Receiver) HTTPEndpoint() string { return "http://" + r.httpAddr }

// GRPCEndpoint is the OTLP/gRPC endpoint, plaintext.
func (r *Receiver) GRPCEndpoint() string { return "http://" + r.grpcAddr }

// Spans returns a copy of the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

func (r *Receiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "want application/x-protobuf", http.StatusUnsupportedMediaType)
		return
	}
	b, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var msg collectorpb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.add(&msg)
	out, _ := proto.Marshal(&collectorpb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// Export implements OTLP/gRPC's TraceService.
func (r *Receiver) Export(_ context.Context, msg *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	r.add(msg)
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

func (r *Receiver) add(msg *collectorpb.ExportTraceServiceRequest) {
	var got []Span
	for _, rs := range msg.GetResourceSpans() {
		res := attrs(rs.GetResource().GetAttributes())
		pid := int64(0)
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "process.pid" {
				pid = kv.GetValue().GetIntValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := Span{Service: res["service.name"], PID: pid, Name: s.GetName(), Kind: s.GetKind(),
					TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					Attrs: attrs(s.GetAttributes()), Status: s.GetStatus().GetCode(),
					Start: s.GetStartTimeUnixNano(), End: s.GetEndTimeUnixNano()}
				if len(s.GetParentSpanId()) > 0 {
					sp.ParentID = hex.EncodeToString(s.GetParentSpanId())
				}
				for _, l := range s.GetLinks() {
					sp.Links = append(sp.Links, Link{TraceID: hex.EncodeToString(l.GetTraceId()),
						SpanID: hex.EncodeToString(l.GetSpanId()), Attrs: attrs(l.GetAttributes())})
				}
				got = append(got, sp)
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	r.mu.Unlock()
}

// attrs flattens attributes to text.
func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = text(kv.GetValue())
	}
	return m
}

func text(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_BoolValue:
		if x.BoolValue {
			return "true"
		}
		return "false"
	case *commonpb.AnyValue_ArrayValue:
		s := ""
		for i, e := range x.ArrayValue.GetValues() {
			if i > 0 {
				s += ","
			}
			s += text(e)
		}
		return s
	}
	return v.String()
}
