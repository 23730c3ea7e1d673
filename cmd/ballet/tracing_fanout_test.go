package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/balletplanner/ballet/api/rpcclient"
	"github.com/balletplanner/ballet/internal/tracing/otlptest"
	"github.com/balletplanner/ballet/store"
)

// traceparent is a sampled W3C traceparent of a client's span.
func traceparent(traceID, spanID string) map[string]string {
	return map[string]string{"traceparent": "00-" + traceID + "-" + spanID + "-01"}
}

// cancelREST cancels a turn through the api's REST route with the headers
// given.
func (s *traceStack) cancelREST(turn string, header map[string]string) {
	s.t.Helper()
	req, err := http.NewRequest("POST", "http://"+s.api.addr+"/api/v1/planner/sessions/"+s.session+"/cancel",
		strings.NewReader(fmt.Sprintf(`{"turn":%q}`, turn)))
	must(s.t, err)
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	must(s.t, err)
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		s.t.Fatalf("cancel: %d", res.StatusCode)
	}
}

// watchAPI watches the session on the api over /rpc, draining what it
// receives, until the test ends.
func (s *traceStack) watchAPI(ctx context.Context) {
	s.t.Helper()
	rc, err := rpcclient.Dial(ctx, "ws://"+s.api.addr+"/rpc", rpcclient.JSON, s.token, nil)
	must(s.t, err)
	s.t.Cleanup(func() { _ = rc.Close() })
	w, err := rc.Watch(ctx, s.session, 0)
	must(s.t, err)
	go func() {
		for range w.Outputs() {
		}
	}()
}

// traceSpans are the spans of one trace, by id and by name.
func traceSpans(spans []otlptest.Span, traceID string) (byID map[string]otlptest.Span, byName map[string][]otlptest.Span) {
	byID, byName = map[string]otlptest.Span{}, map[string][]otlptest.Span{}
	for _, sp := range spans {
		if sp.TraceID == traceID {
			byID[sp.SpanID] = sp
			byName[sp.Name] = append(byName[sp.Name], sp)
		}
	}
	return byID, byName
}

// checkFanouts checks the api's fan-out spans of a turn's trace: each one
// the api's, under a span of the trace that published the output, with
// the one watcher; and returns the output types fanned out.
func checkFanouts(t *testing.T, spans []otlptest.Span, traceID, turn string) map[string]otlptest.Span {
	t.Helper()
	byID, byName := traceSpans(spans, traceID)
	types := map[string]otlptest.Span{}
	for _, f := range byName["planner.fanout"] {
		parent, ok := byID[f.ParentID]
		if f.Service != "ballet-api" || !ok || f.Attrs["ballet.turn"] != turn || f.Attrs["ballet.watchers"] != "1" ||
			f.Attrs["ballet.lagging"] != "0" || f.Attrs["messaging.system"] != "redis" || !strings.HasSuffix(f.Attrs["messaging.destination.name"], turnSession(spans, turn)) {
			t.Errorf("fan-out span %+v (parent %q)", f, parent.Name)
		}
		types[f.Attrs["ballet.output.type"]] = f
	}
	return types
}

// turnSession is the session of a turn's send span.
func turnSession(spans []otlptest.Span, turn string) string {
	for _, sp := range spans {
		if sp.Name == "planner.send" && sp.Attrs["ballet.turn"] == turn {
			return sp.Attrs["ballet.session"]
		}
	}
	return "<no send span>"
}

// A session watched on the api: the hub's fan-out of each published output
// is a planner.fanout span in the trace of the turn that published it,
// under the span that published it (the api's send, the worker's publish),
// with the number of watchers. A turn cancelled while queued, which no
// worker ever ran, still has its trace from the send to its done: a
// planner.cancel_queued span under the send, linked to the client's
// cancel, publishes the done, which the hub fans out in that trace.
func TestFanoutAndAQueuedCancelAreTraced(t *testing.T) {
	t.Parallel()
	s := newTraceStack(t, "answers:\n  - content:\n      - text: Start with the login form.\n", "http/protobuf")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s.watchAPI(ctx)
	const ranTrace, queuedTrace, cancelTrace = "4bf92f3577b34da6a3ce929d0e0e4001", "4bf92f3577b34da6a3ce929d0e0e4002", "4bf92f3577b34da6a3ce929d0e0e4003"
	const clientSpan = "00f067aa0ba902b7"
	// No worker yet: the second turn waits behind the first.
	ran := s.sendREST("what can start now?", traceparent(ranTrace, clientSpan))
	queued := s.sendREST("and after that?", traceparent(queuedTrace, clientSpan))
	s.cancelREST(queued, traceparent(cancelTrace, clientSpan))
	if outs := s.waitDone(queued); outs[len(outs)-1].Text != store.ReasonCancelled {
		t.Fatalf("queued turn's outputs %v", outs)
	}
	s.worker()
	s.waitDone(ran)
	s.waitSpan("the fan-out of the ran turn's done", ranTrace, func(sp otlptest.Span) bool {
		return sp.Name == "planner.fanout" && sp.Attrs["ballet.output.type"] == store.OutputDone
	})
	s.waitSpan("the fan-out of the cancelled turn's done", queuedTrace, func(sp otlptest.Span) bool {
		return sp.Name == "planner.fanout" && sp.Attrs["ballet.output.type"] == store.OutputDone
	})
	byCancel := s.waitSpan("the client's cancel", cancelTrace, named("planner.cancel"))
	s.waitSpan("the ran turn's attempt", ranTrace, named("planner.turn"))
	spans := s.otlp.Spans()

	checkTurnTrace(t, spans, ranTrace, clientSpan, ran, "")
	byID, _ := traceSpans(spans, ranTrace)
	fanned := checkFanouts(t, spans, ranTrace, ran)
	for _, typ := range []string{store.OutputQueued, store.OutputStarted, store.OutputMessage, store.OutputDone} {
		if _, ok := fanned[typ]; !ok {
			t.Errorf("no fan-out of the ran turn's %s output (fanned out: %v)", typ, fanned)
		}
	}
	if p := byID[fanned[store.OutputQueued].ParentID]; p.Name != "planner.send" {
		t.Errorf("the queued output's fan-out is under %q, not the send", p.Name)
	}
	if p := byID[fanned[store.OutputDone].ParentID]; p.Name != "planner.publish" || p.Service != "ballet-worker" {
		t.Errorf("the done output's fan-out is under %q of %s, not the worker's publish", p.Name, p.Service)
	}

	byID, byName := traceSpans(spans, queuedTrace)
	send := byName["planner.send"]
	if len(send) != 1 || send[0].ParentID != clientSpan || send[0].Attrs["ballet.turn"] != queued {
		t.Fatalf("the cancelled turn's send spans %+v", send)
	}
	ends := byName["planner.cancel_queued"]
	if len(ends) != 1 {
		t.Fatalf("the cancelled turn's planner.cancel_queued spans %+v; want one", ends)
	}
	end := ends[0]
	if end.ParentID != send[0].SpanID || end.Service != "ballet-api" || end.Attrs["ballet.turn"] != queued ||
		end.Attrs["ballet.done_reason"] != store.ReasonCancelled || !strings.Contains(end.Attrs["ballet.output.types"], store.OutputDone) {
		t.Errorf("planner.cancel_queued %+v; want the api's, under the send, with the done", end)
	}
	if len(end.Links) != 1 || end.Links[0].TraceID != cancelTrace || end.Links[0].SpanID != byCancel.SpanID ||
		end.Links[0].Attrs["ballet.link"] != "cancelled_by" {
		t.Errorf("planner.cancel_queued links %+v; want one to the cancel %s", end.Links, byCancel.SpanID)
	}
	if byCancel.ParentID != clientSpan || byCancel.Attrs["ballet.turn"] != queued {
		t.Errorf("the cancel's span %+v is not the client's child", byCancel)
	}
	if len(byName["planner.turn"]) != 0 || len(byName["planner.queue_wait"]) != 0 {
		t.Errorf("the cancelled turn was never claimed, yet its trace has %v", byName)
	}
	fanned = checkFanouts(t, spans, queuedTrace, queued)
	if p := byID[fanned[store.OutputDone].ParentID]; p.SpanID != end.SpanID {
		t.Errorf("the cancelled turn's done was fanned out under %q, not planner.cancel_queued", p.Name)
	}
	if p := byID[fanned[store.OutputQueued].ParentID]; p.SpanID != send[0].SpanID {
		t.Errorf("the cancelled turn's queued output was fanned out under %q, not its send", p.Name)
	}
}

// A turn whose history is over planner.compact_at_tokens compacts it
// first: a planner.compact span under its attempt, with the estimate, the
// outcome and the cursor it summarized up to, around the summary's model
// call (relayed by the gateway) and the publish of the compacted output.
func TestCompactionIsTraced(t *testing.T) {
	t.Parallel()
	s := newTraceStack(t, `
answers:
  - match: 'Summarize the conversation above'
    content:
      - text: "SUMMARY-OF-EARLIER: the human decided WEB-1 comes first."
  - match: '^first question'
    usage: {input_tokens: 5000, output_tokens: 10}
    content:
      - text: "We decided WEB-1 comes first."
  - match: 'second question'
    content:
      - text: "Noted."
`, "http/protobuf")
	s.env = append(s.env, "BALLET_PLANNER_COMPACT_AT_TOKENS=1000")
	s.worker()
	s.waitDone(s.sendREST("first question", nil))
	const traceID, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4010", "00f067aa0ba902b7"
	turn := s.sendREST("second question", traceparent(traceID, clientSpan))
	s.waitDone(turn)
	compact := s.waitSpan("the compaction span", traceID, named("planner.compact"))
	s.waitSpan("the turn's attempt", traceID, named("planner.turn"))
	spans := s.otlp.Spans()
	byName := checkTurnTrace(t, spans, traceID, clientSpan, turn, "")
	byID, _ := traceSpans(spans, traceID)
	if p := byID[compact.ParentID]; p.Name != "planner.turn" || compact.Service != "ballet-worker" {
		t.Fatalf("planner.compact is under %q of %s, not the attempt", p.Name, compact.Service)
	}
	est, err := strconv.Atoi(compact.Attrs["ballet.estimated_tokens"])
	if err != nil || est < 5010 || compact.Attrs["ballet.compaction.outcome"] != "ok" || compact.Attrs["ballet.compaction.up_to"] != "2" {
		t.Fatalf("planner.compact attributes %v; want an estimate of at least 5010, ok, up to 2", compact.Attrs)
	}
	var summary, published bool
	for name, list := range byName {
		for _, sp := range list {
			if sp.ParentID != compact.SpanID {
				continue
			}
			summary = summary || strings.HasPrefix(name, "chat ")
			published = published || name == "planner.publish" && sp.Attrs["ballet.output.types"] == store.OutputCompacted
		}
	}
	if !summary || !published {
		t.Fatalf("under planner.compact: a summary's chat span %v, the compacted output's publish %v", summary, published)
	}
	for _, g := range byName["gateway.messages"] {
		if byID[byID[g.ParentID].ParentID].SpanID == compact.SpanID {
			return
		}
	}
	t.Fatal("the gateway's relay of the summary's call is not under planner.compact")
}
