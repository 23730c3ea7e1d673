package worker_test

import (
	"context"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/worker"
)

func compactScript(compaction string) string {
	return `
answers:
  - match: 'Summarize the conversation above'
` + compaction + `
  - match: '^first question'
    usage: {input_tokens: 5000, output_tokens: 10}
    content:
      - text: "We decided WEB-1 comes first."
  - match: '^(second|third) question'
    content:
      - text: "Noted."
  - match: '^look twice'
    content:
      - tool_use: {name: lookup, input: {q: x}}
  - match: 'tool_result lookup'
    content:
      - text: "Looked."
`
}

const goodSummary = `    content:
      - text: "SUMMARY-OF-EARLIER: the human decided WEB-1 comes first."`

func compactAt(n int) envOption {
	return func(_ *worker.Config, p *worker.PlannerConfig) { p.CompactAtTokens = n }
}

func lastRequest(e *env) string {
	reqs := e.fake.Requests()
	return string(reqs[len(reqs)-1].Body)
}

func TestCompactionAtThreshold(t *testing.T) {
	t.Parallel()
	e := newEnv(t, compactScript(goodSummary))
	e.start(compactAt(1000))
	s := e.session()
	e.waitDone(s, e.send(s, "first question").Turn)
	turn2 := e.send(s, "second question").Turn
	outs := e.waitDone(s, turn2)
	var compacted *store.Output
	for i := range outs {
		if outs[i].Type == store.OutputCompacted {
			compacted = &outs[i]
		}
	}
	if compacted == nil || compacted.Seq != 2 {
		t.Fatalf("compacted output %+v, want seq 2 (the first turn's last message); outputs %v", compacted, types(outs))
	}
	ctx := context.Background()
	var summary string
	var upTo int64
	must(t, e.db.Pool().QueryRow(ctx, `SELECT summary, summary_up_to FROM planner_sessions WHERE id = $1`, s).Scan(&summary, &upTo))
	if !strings.Contains(summary, "SUMMARY-OF-EARLIER") || upTo != 2 {
		t.Fatalf("stored summary %q up to %d", summary, upTo)
	}
	var payloadUpTo, estimated int64
	must(t, e.db.Pool().QueryRow(ctx, `SELECT (payload->>'up_to')::bigint, (payload->>'estimated_tokens')::bigint
		FROM events WHERE type = 'planner.compacted' AND entity_id = $1`, s).Scan(&payloadUpTo, &estimated))
	if payloadUpTo != 2 || estimated < 5010 {
		t.Fatalf("planner.compacted {up_to: %d, estimated_tokens: %d}", payloadUpTo, estimated)
	}
	// The compaction request carried the earlier turn; the next model call
	// carries the summary instead of it.
	reqs := e.fake.Requests()
	compaction := string(reqs[len(reqs)-2].Body)
	if !strings.Contains(compaction, "first question") || !strings.Contains(compaction, "decisions") {
		t.Fatalf("compaction request: %s", compaction)
	}
	next := lastRequest(e)
	if !strings.Contains(next, "SUMMARY-OF-EARLIER") || strings.Contains(next, "first question") || !strings.Contains(next, "second question") {
		t.Fatalf("model call after compaction: %s", next)
	}
	// The following turn is measured from the new answer: no second compaction.
	n := len(e.fake.Requests())
	e.waitDone(s, e.send(s, "third question").Turn)
	if got := len(e.fake.Requests()) - n; got != 1 {
		t.Fatalf("third turn made %d model calls, want 1", got)
	}
}

func TestCompactionFailureGoesOnUncompacted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, compactScript(`    fault: {kind: status, status: 500, message: "summarizer down"}`))
	e.start(compactAt(1000))
	s := e.session()
	e.waitDone(s, e.send(s, "first question").Turn)
	outs := e.waitDone(s, e.send(s, "second question").Turn)
	for _, o := range outs {
		if o.Type == store.OutputCompacted || o.Type == store.OutputError {
			t.Fatalf("unexpected %s output: %v", o.Type, types(outs))
		}
	}
	if outs[len(outs)-1].Text != "end_turn" {
		t.Fatalf("done %q", outs[len(outs)-1].Text)
	}
	if next := lastRequest(e); !strings.Contains(next, "first question") {
		t.Fatalf("model call after a failed compaction lost history: %s", next)
	}
	var summaries int
	must(t, e.db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM planner_sessions WHERE summary IS NOT NULL`).Scan(&summaries))
	if summaries != 0 {
		t.Fatalf("%d summaries stored after a failed compaction", summaries)
	}
}

// A turn that alone is over the threshold has nothing to compact: no
// compaction call, and no loop.
func TestNoCompactionLoopWhenTheTurnAloneIsOver(t *testing.T) {
	t.Parallel()
	e := newEnv(t, compactScript(goodSummary))
	e.start(compactAt(10))
	s := e.session()
	outs := e.waitDone(s, e.send(s, "look twice").Turn)
	if outs[len(outs)-1].Text != "end_turn" {
		t.Fatalf("done %q", outs[len(outs)-1].Text)
	}
	for _, r := range e.fake.Requests() {
		if strings.Contains(string(r.Body), "Summarize the conversation above") {
			t.Fatal("a compaction was attempted with nothing before the current turn")
		}
	}
	if n := len(e.fake.Requests()); n != 2 {
		t.Fatalf("%d model calls, want 2", n)
	}
}
