package worker_test

import (
	"context"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
	"github.com/balletplanner/ballet/worker"
)

const cancelScript = `
answers:
  - match: 'Summarize the conversation above'
    latency: 30s
    content:
      - text: "never"
  - match: '^big'
    usage: {input_tokens: 5000, output_tokens: 10}
    content:
      - text: "Big answer."
  - match: 'fresh'
    content:
      - text: "Fresh answer."
  - match: '^stream slowly'
    chunk_size: 1
    chunk_latency: 200ms
    content:
      - text: "This answer takes a long time to arrive, one letter at a time, so that it can be cancelled."
  - match: '^use the slow tool'
    content:
      - tool_use: {name: slow, input: {q: x}}
  - match: '.'
    content:
      - text: "Quick answer."
`

func (e *env) cancel(session, turn string) store.CancelResult {
	e.t.Helper()
	res, err := e.planner.Cancel(context.Background(), e.human, session, turn)
	must(e.t, err)
	return res
}

// eventually polls cond until it holds, failing t after storetest's timeout.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	storetest.WaitFor(t, what, cond)
}

func assertCancelled(t *testing.T, e *env, session, turn string) []store.Output {
	t.Helper()
	outs := e.waitDone(session, turn)
	if done := outs[len(outs)-1]; done.Text != store.ReasonCancelled {
		t.Fatalf("done %q, want cancelled: %v", done.Text, types(outs))
	}
	dones := 0
	for _, o := range outs {
		if o.Type == store.OutputDone {
			dones++
		}
	}
	if dones != 1 {
		t.Fatalf("%d done outputs", dones)
	}
	// Revoked, not retried: the task is gone from the queue.
	eventually(t, "the task to leave the queue", func() bool {
		there, err := e.queue.Exists(turn)
		return err == nil && !there
	})
	return outs
}

func TestCancelBeforePickup(t *testing.T) {
	t.Parallel()
	e := newEnv(t, cancelScript)
	s := e.session()
	turn := e.send(s, "hello").Turn
	there, err := e.queue.Exists(turn)
	must(t, err)
	if !there {
		t.Fatal("the sent turn is not in the queue")
	}
	res := e.cancel(s, turn)
	if len(res.Dequeued) != 1 || len(res.Running) != 0 {
		t.Fatalf("cancel result %+v", res)
	}
	assertCancelled(t, e, s, turn)
	e.start()
	e.waitDone(s, e.send(s, "after").Turn)
	if n := len(e.fake.Requests()); n != 1 {
		t.Fatalf("%d model calls, want 1: the cancelled turn must not run", n)
	}
	for _, o := range e.outputs(s, turn) {
		if o.Type == store.OutputStarted {
			t.Fatal("the cancelled turn started")
		}
	}
}

func TestCancelDuringModelStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t, cancelScript)
	e.start()
	s := e.session()
	turn := e.send(s, "stream slowly please").Turn
	eventually(t, "the model stream to start", func() bool { return e.fake.Active() > 0 })
	e.cancel(s, turn)
	outs := assertCancelled(t, e, s, turn)
	for _, o := range outs {
		if o.Type == store.OutputMessage {
			t.Fatal("an aborted answer was stored")
		}
	}
	eventually(t, "the model stream to be closed", func() bool { return e.fake.Active() == 0 })
}

// A cancel committed just after the claim read the turn's cancel flag still
// ends the turn, and before it calls the model: the turn is watched for
// nudges from before its claim, so the nudge ends the turn's context even
// though the history the claim read says nothing of the cancel.
func TestCancelRightAfterTheClaim(t *testing.T) {
	t.Parallel()
	e := newEnv(t, cancelScript)
	s := e.session()
	worker.SetToolHooks(t, s, worker.ToolHooks{AfterClaim: func(ctx context.Context, turn string) {
		if res := e.cancel(s, turn); len(res.Running) != 1 {
			t.Errorf("cancel result %+v, want the turn running", res)
		}
		if !storetest.Poll(storetest.WaitTimeout, func() bool { return ctx.Err() != nil }) {
			t.Errorf("the cancel nudge did not reach turn %s within %s", turn, storetest.WaitTimeout)
		}
	}})
	e.start()
	turn := e.send(s, "stream slowly please").Turn
	assertCancelled(t, e, s, turn)
	if n := len(e.fake.Requests()); n != 0 {
		t.Fatalf("%d model calls, want none: the turn was cancelled before its first step", n)
	}
}

func TestCancelDuringToolCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t, cancelScript)
	e.start()
	s := e.session()
	turn := e.send(s, "use the slow tool").Turn
	<-e.started
	e.cancel(s, turn)
	outs := assertCancelled(t, e, s, turn)
	var result *store.Output
	for i := range outs {
		if outs[i].Type == store.OutputToolResult {
			result = &outs[i]
		}
	}
	if result == nil || !result.IsError || !strings.Contains(result.Text, "cancelled") {
		t.Fatalf("tool result %+v", result)
	}
	if n := e.calledTimes("slow"); n != 1 {
		t.Fatalf("slow ran %d times", n)
	}
}

func TestCancelDuringCompaction(t *testing.T) {
	t.Parallel()
	e := newEnv(t, cancelScript)
	e.start(compactAt(1000))
	s := e.session()
	e.waitDone(s, e.send(s, "big question").Turn)
	turn := e.send(s, "next").Turn
	eventually(t, "the compaction call", func() bool {
		reqs := e.fake.Requests()
		return e.fake.Active() > 0 && strings.Contains(string(reqs[len(reqs)-1].Body), "Summarize the conversation above")
	})
	e.cancel(s, turn)
	assertCancelled(t, e, s, turn)
	var summaries int
	must(t, e.db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM planner_sessions WHERE summary IS NOT NULL`).Scan(&summaries))
	if summaries != 0 {
		t.Fatal("a cancelled compaction stored a summary")
	}
}

// Cancelling a session's turns ends the running one and every queued one,
// each with exactly one done.
func TestCancelAllOfASession(t *testing.T) {
	t.Parallel()
	e := newEnv(t, cancelScript)
	e.start()
	s := e.session()
	running := e.send(s, "stream slowly").Turn
	q1 := e.send(s, "queued one").Turn
	q2 := e.send(s, "queued two").Turn
	eventually(t, "the model stream to start", func() bool { return e.fake.Active() > 0 })
	res := e.cancel(s, "")
	if len(res.Running) != 1 || len(res.Outputs) != 2 {
		t.Fatalf("cancel result %+v", res)
	}
	for _, turn := range []string{running, q1, q2} {
		assertCancelled(t, e, s, turn)
	}
	// The session takes new turns afterwards; the queued turns that never
	// ran are not part of what the model sees.
	if outs := e.waitDone(s, e.send(s, "fresh").Turn); outs[len(outs)-1].Text != "end_turn" {
		t.Fatalf("fresh turn ended %q", outs[len(outs)-1].Text)
	}
	if body := lastRequest(e); strings.Contains(body, "queued one") || !strings.Contains(body, "stream slowly") {
		t.Fatalf("history after cancels: %s", body)
	}
}
