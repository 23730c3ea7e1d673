package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/balletplanner/ballet/internal/tracing/otlptest"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
)

// traceStack is a stack whose api, gateway and two workers run as
// separate processes exporting their spans to an OTLP receiver.
type traceStack struct {
	*stack
	otlp    *otlptest.Receiver
	api     *process
	gateway *process
	token   string
}

// newTraceStack starts the processes with OTEL_* set for protocol (the
// gateway serves script as its fake upstream over HTTP).
func newTraceStack(t *testing.T, script, protocol string) *traceStack {
	t.Helper()
	s := &traceStack{stack: newStack(t, script), otlp: otlptest.Start(t)}
	endpoint := s.otlp.HTTPEndpoint()
	if protocol == "grpc" {
		endpoint = s.otlp.GRPCEndpoint()
	}
	scriptFile := filepath.Join(t.TempDir(), "script.yaml")
	must(t, os.WriteFile(scriptFile, []byte(script), 0o600))
	gw := freeAddr(t)
	s.env = append(s.env, "BALLET_AUTH_MODE=token", "BALLET_GATEWAY_URL=http://"+gw,
		"OTEL_EXPORTER_OTLP_ENDPOINT="+endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL="+protocol,
		// Export each span within 50 ms of its end: a SIGKILLed worker's
		// ended spans reach the receiver before the kill.
		"OTEL_BSP_SCHEDULE_DELAY=50")
	s.gateway = startProcess(t, append(s.env, "BALLET_GATEWAY_ADDR="+gw, "BALLET_GATEWAY_FAKE="+scriptFile,
		"BALLET_GATEWAY_FAKE_ADDR="+freeAddr(t)), "gateway")
	s.gateway.addr = gw
	s.api = startProcess(t, s.env, "api")
	s.gateway.waitReady(t)
	s.api.waitReady(t)
	token, _, err := s.db.CreateAPIToken(context.Background(), "ann@example.com", "tracing", time.Hour)
	must(t, err)
	s.token = token
	return s
}

// sendREST sends text through the api's REST route with the headers given.
func (s *traceStack) sendREST(text string, header map[string]string) string {
	s.t.Helper()
	body := fmt.Sprintf(`{"text":%q}`, text)
	req, err := http.NewRequest("POST", "http://"+s.api.addr+"/api/v1/planner/sessions/"+s.session+"/messages", strings.NewReader(body))
	must(s.t, err)
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	must(s.t, err)
	defer res.Body.Close()
	var out struct{ Turn string }
	must(s.t, json.NewDecoder(res.Body).Decode(&out))
	if res.StatusCode != http.StatusAccepted || out.Turn == "" {
		s.t.Fatalf("send: %d %+v", res.StatusCode, out)
	}
	return out.Turn
}

// waitSpan waits for a span of the trace that ok accepts, and returns it.
func (s *traceStack) waitSpan(what, traceID string, ok func(otlptest.Span) bool) otlptest.Span {
	s.t.Helper()
	var found otlptest.Span
	storetest.WaitFor(s.t, what, func() bool {
		for _, sp := range s.otlp.Spans() {
			if sp.TraceID == traceID && ok(sp) {
				found = sp
				return true
			}
		}
		return false
	})
	return found
}

func named(name string) func(otlptest.Span) bool {
	return func(sp otlptest.Span) bool { return sp.Name == name }
}

// checkTurnTrace checks what every traced turn shows: one trace from the
// client's send to the turn's done, with spans from the api, the workers
// and the gateway, each model call with its GenAI attributes and the
// gateway's relay under it. killed is the span id of an attempt whose
// worker was SIGKILLed (never exported, nor its call in flight), or "".
func checkTurnTrace(t *testing.T, spans []otlptest.Span, traceID, clientSpan, turn, killed string) (byName map[string][]otlptest.Span) {
	t.Helper()
	byName = map[string][]otlptest.Span{}
	byID := map[string]otlptest.Span{}
	services := map[string]bool{}
	for _, sp := range spans {
		if sp.Attrs["ballet.turn"] == turn && sp.TraceID != traceID {
			t.Errorf("span %s of the turn is in trace %s, not %s", sp.Name, sp.TraceID, traceID)
		}
		if sp.TraceID != traceID {
			continue
		}
		byName[sp.Name] = append(byName[sp.Name], sp)
		byID[sp.SpanID] = sp
		services[sp.Service] = true
	}
	for _, svc := range []string{"ballet-api", "ballet-worker", "ballet-gateway"} {
		if !services[svc] {
			t.Errorf("no span of %s in the trace (services %v)", svc, services)
		}
	}
	send := byName["planner.send"]
	if len(send) != 1 || send[0].ParentID != clientSpan || send[0].Service != "ballet-api" || send[0].Attrs["ballet.turn"] != turn {
		t.Fatalf("planner.send spans %+v; want one, of the api, child of the client's span %s", send, clientSpan)
	}
	waits := byName["planner.queue_wait"]
	if len(waits) != 1 || waits[0].ParentID != send[0].SpanID || waits[0].End < waits[0].Start {
		t.Errorf("queue wait spans %+v; want one under the send", waits)
	}
	for _, at := range byName["planner.turn"] {
		if at.ParentID != send[0].SpanID || at.Service != "ballet-worker" {
			t.Errorf("attempt span %+v is not a worker's child of the send", at)
		}
	}
	chats := 0
	for name, list := range byName {
		if !strings.HasPrefix(name, "chat ") {
			continue
		}
		for _, c := range list {
			chats++
			if c.Attrs["gen_ai.operation.name"] != "chat" || c.Attrs["gen_ai.request.model"] == "" ||
				c.Attrs["gen_ai.provider.name"] != "anthropic" || c.Attrs["gen_ai.usage.output_tokens"] == "" {
				t.Errorf("chat span attributes %v", c.Attrs)
			}
			// A compaction's summary is a model call inside planner.compact.
			if p := byID[c.ParentID].Name; p != "planner.turn" && p != "planner.compact" && (killed == "" || c.ParentID != killed) {
				t.Errorf("chat span's parent is %q, not an attempt", p)
			}
		}
	}
	if chats == 0 {
		t.Error("no chat span")
	}
	lost := 0
	for _, g := range byName["gateway.messages"] {
		// One call may have been in flight when its worker was killed:
		// its chat span was never exported.
		if killed != "" && byID[g.ParentID].Name == "" {
			lost++
			continue
		}
		if g.Service != "ballet-gateway" || !strings.HasPrefix(byID[g.ParentID].Name, "chat ") {
			t.Errorf("gateway span %+v is not a child of a worker's chat span", g)
		}
	}
	if lost > 1 {
		t.Errorf("%d gateway calls whose chat span is missing, want at most the one in flight at the kill", lost)
	}
	for _, name := range []string{"gateway.messages", "gateway.reserve", "gateway.upstream anthropic", "gateway.meter", "planner.claim", "planner.publish"} {
		if len(byName[name]) == 0 {
			t.Errorf("no %s span (spans: %v)", name, slices.Sorted(mapKeys(byName)))
		}
	}
	done := false
	for _, p := range byName["planner.publish"] {
		done = done || strings.Contains(p.Attrs["ballet.output.types"], store.OutputDone)
	}
	if !done {
		t.Error("no publish of the done output in the trace")
	}
	return byName
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// A turn sent over REST with a client's traceparent, whose worker is
// SIGKILLed mid-turn: the whole turn is one trace, the client's, with the
// api's send, the queue wait, both workers' attempts, the model and tool
// calls and the gateway's relay; the resumed attempt links to the one it
// resumes.
func TestTurnIsOneTraceAcrossProcessesAndAResume(t *testing.T) {
	t.Parallel()
	script, release := resumeScript(t)
	s := newTraceStack(t, script, "http/protobuf")
	a, b := s.worker(), s.worker()
	const traceID, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	turn := s.sendREST("what can start now?", map[string]string{"traceparent": "00-" + traceID + "-" + clientSpan + "-01"})
	storetest.WaitFor(t, "the turn's tool result", func() bool { return countTypes(s.outputs(), store.OutputToolResult) > 0 })
	// The first attempt's tool span reached the receiver: its parent is
	// the attempt the resume must link to.
	tool := s.waitSpan("the first attempt's tool span", traceID, named("execute_tool list_runnable"))
	victim := a
	if b.cmd.Process.Pid == s.leaseHolder() {
		victim = b
	}
	if int(tool.PID) != victim.cmd.Process.Pid {
		t.Fatalf("the tool ran in pid %d, the lease holder is %d", tool.PID, victim.cmd.Process.Pid)
	}
	must(t, victim.cmd.Process.Signal(syscall.SIGKILL))
	must(t, os.WriteFile(release, nil, 0o600))
	outs := s.waitDone(turn)
	if done := outs[len(outs)-1]; done.Text != "end_turn" {
		t.Fatalf("outputs %v", outs)
	}
	resumed := s.waitSpan("the resumed attempt's span", traceID, func(sp otlptest.Span) bool {
		return sp.Name == "planner.turn" && sp.Attrs["ballet.attempt"] == "2"
	})
	s.waitSpan("the api's send span", traceID, named("planner.send"))
	if int(resumed.PID) == victim.cmd.Process.Pid || resumed.Attrs["ballet.done_reason"] != "end_turn" {
		t.Fatalf("resumed attempt %+v", resumed)
	}
	if len(resumed.Links) != 1 || resumed.Links[0].TraceID != traceID || resumed.Links[0].SpanID != tool.ParentID {
		t.Fatalf("resumed attempt links %+v; want one to the first attempt %s", resumed.Links, tool.ParentID)
	}
	byName := checkTurnTrace(t, s.otlp.Spans(), traceID, clientSpan, turn, tool.ParentID)
	pids := map[int64]bool{}
	for _, sp := range byName["planner.claim"] {
		pids[sp.PID] = true
	}
	if len(pids) != 2 {
		t.Errorf("claims by %d worker processes, want 2", len(pids))
	}
	var results int
	for _, sp := range byName["execute_tool list_runnable"] {
		if sp.Attrs["ballet.tool.outcome"] == "ok" && sp.Attrs["gen_ai.tool.name"] == "list_runnable" {
			results++
		}
	}
	if results != 1 {
		t.Errorf("%d tool spans that ran the tool, want 1", results)
	}
}

// Over OTLP/gRPC, a send without a traceparent starts a trace of its own,
// from the send to the done; the worker's log lines logged in the turn's
// spans carry its trace and span ids; and a worker stopped with SIGTERM
// exports the spans it still buffered (its batches wait 10 minutes).
func TestTurnTraceOverGRPCStartsATrace(t *testing.T) {
	t.Parallel()
	s := newTraceStack(t, "answers:\n  - content:\n      - text: Start with the login form.\n", "grpc")
	s.env = append(s.env, "BALLET_LOG_LEVEL=info", "BALLET_LOG_FORMAT=json", "OTEL_BSP_SCHEDULE_DELAY=600000")
	w := s.worker()
	turn := s.sendREST("what can start now?", nil)
	s.waitDone(turn)
	for _, sp := range s.otlp.Spans() {
		if sp.Service == "ballet-worker" {
			t.Fatalf("the worker exported %s before its batch was due", sp.Name)
		}
	}
	w.stop(t)
	var send otlptest.Span
	storetest.WaitFor(t, "the api's send span", func() bool {
		for _, sp := range s.otlp.Spans() {
			if sp.Name == "planner.send" && sp.Attrs["ballet.turn"] == turn {
				send = sp
				return true
			}
		}
		return false
	})
	attempt := s.waitSpan("the attempt's span", send.TraceID, named("planner.turn"))
	s.waitSpan("the gateway's span", send.TraceID, named("gateway.meter"))
	if send.ParentID != "" || attempt.Attrs["ballet.done_reason"] != "end_turn" || len(attempt.Links) != 0 {
		t.Fatalf("send %+v, attempt %+v", send, attempt)
	}
	checkTurnTrace(t, s.otlp.Spans(), send.TraceID, "", turn, "")
	line := ""
	for l := range strings.Lines(w.log()) {
		if strings.Contains(l, `"msg":"turn ended"`) {
			line = l
		}
	}
	if !strings.Contains(line, `"trace_id":"`+send.TraceID+`"`) || !strings.Contains(line, `"span_id":"`+attempt.SpanID+`"`) {
		t.Fatalf("turn ended line %q lacks trace %s and span %s", line, send.TraceID, attempt.SpanID)
	}
}
