package worker_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
	"github.com/balletplanner/ballet/worker"
)

const twoRounds = `
answers:
  - match: '^plan it'
    content:
      - text: "Let me look."
      - tool_use: {name: lookup, input: {q: one}}
  - match: 'tool_result lookup.*one'
    content:
      - tool_use: {name: lookup, input: {q: two}}
  - match: 'tool_result lookup.*two'
    content:
      - text: "Done: see WEB-1 and WEB-2."
  - match: 'tool_result broken'
    content:
      - text: "That item does not exist; nothing else to do."
  - match: '^break it'
    content:
      - tool_use: {name: broken, input: {q: x}}
`

func TestTurnWithTwoToolRounds(t *testing.T) {
	t.Parallel()
	e := newEnv(t, twoRounds)
	e.start()
	s := e.session()
	res := e.send(s, "plan it please")
	outs := e.waitDone(s, res.Turn)
	want := []string{"queued", "started", "message", "tool_call", "tool_result", "message",
		"message", "tool_call", "tool_result", "message", "message", "done"}
	if got := types(outs); !slices.Equal(got, want) {
		t.Fatalf("outputs %v\nwant    %v", got, want)
	}
	for i, o := range outs {
		if o.Cursor != int64(i+1) || o.Turn != res.Turn || o.Session != s {
			t.Fatalf("output %d: cursor %d turn %s session %s", i, o.Cursor, o.Turn, o.Session)
		}
	}
	if done := outs[len(outs)-1]; done.Text != "end_turn" {
		t.Errorf("done reason %q, want end_turn", done.Text)
	}
	if n := e.calledTimes("lookup"); n != 2 {
		t.Errorf("lookup ran %d times, want 2", n)
	}
	sess, err := e.db.GetSession(context.Background(), e.human, s)
	must(t, err)
	roles := []string{}
	for _, m := range sess.Messages {
		roles = append(roles, m.Role)
	}
	if want := []string{"user", "assistant", "user", "assistant", "user", "assistant"}; !slices.Equal(roles, want) {
		t.Fatalf("messages %v, want %v", roles, want)
	}
	last := sess.Messages[len(sess.Messages)-1]
	if last.Content[0].Text != "Done: see WEB-1 and WEB-2." || last.StopReason != "end_turn" || last.Usage.OutputTokens == 0 {
		t.Errorf("last message %+v", last)
	}
	// The planner acted for the human: its message events say so.
	var actingFor int
	must(t, e.db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM events WHERE type = 'planner.message'
		AND actor_kind = 'service' AND actor_subject = $1 AND acting_for = 'ann@example.com'`, "planner:"+s).Scan(&actingFor))
	if actingFor != 5 {
		t.Errorf("%d planner.message events acting for the human, want 5", actingFor)
	}
	// The worker's own event numberer numbers them: no api runs here.
	storetest.WaitFor(t, "the turn's events to be numbered", func() bool {
		queued, err := e.db.EventsToNumber(context.Background())
		must(t, err)
		return !queued
	})
	var numbered int
	must(t, e.db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM events e JOIN event_numbers n USING (seq)
		WHERE e.type = 'planner.message' AND e.actor_subject = $1`, "planner:"+s).Scan(&numbered))
	if numbered != 5 {
		t.Errorf("%d of the 5 planner.message events numbered", numbered)
	}
}

func TestFailingToolCallAndTheTurnGoesOn(t *testing.T) {
	t.Parallel()
	e := newEnv(t, twoRounds)
	e.start()
	s := e.session()
	res := e.send(s, "break it")
	outs := e.waitDone(s, res.Turn)
	var result store.Output
	for _, o := range outs {
		if o.Type == store.OutputToolResult {
			result = o
		}
	}
	if !result.IsError || !strings.Contains(result.Text, "not found: item WEB-99 not found") {
		t.Fatalf("tool result %+v, want an error result naming WEB-99", result)
	}
	if done := outs[len(outs)-1]; done.Text != "end_turn" {
		t.Fatalf("done %q, want end_turn", done.Text)
	}
	// The model saw the error result.
	reqs := e.fake.Requests()
	if body := string(reqs[len(reqs)-1].Body); !strings.Contains(body, `"is_error":true`) || !strings.Contains(body, "WEB-99") {
		t.Fatalf("last model request lacks the error result: %s", body)
	}
}

const alwaysTools = `
answers:
  - match: 'interrupted'
    content:
      - text: "Picking up where we stopped."
  - match: '.'
    content:
      - text: "Looking again."
      - tool_use: {name: lookup, input: {q: again}}
`

func TestMaxRounds(t *testing.T) {
	t.Parallel()
	e := newEnv(t, alwaysTools)
	e.start(func(_ *worker.Config, p *worker.PlannerConfig) { p.MaxRounds = 2 })
	s := e.session()
	res := e.send(s, "keep looking")
	outs := e.waitDone(s, res.Turn)
	n := len(outs)
	if outs[n-1].Text != "max_rounds" || outs[n-2].Type != store.OutputError ||
		!strings.Contains(outs[n-2].Text, "stopped after 2 tool rounds") || !strings.Contains(outs[n-2].Text, "new message") {
		t.Fatalf("last outputs %+v %+v", outs[n-2], outs[n-1])
	}
	if got := e.calledTimes("lookup"); got != 2 {
		t.Fatalf("lookup ran %d times, want 2: the third answer's call must not run", got)
	}
	// A new message continues; the unanswered call is repaired as interrupted.
	res2 := e.send(s, "go on")
	outs2 := e.waitDone(s, res2.Turn)
	if outs2[len(outs2)-1].Text != "end_turn" {
		t.Fatalf("second turn ended %q", outs2[len(outs2)-1].Text)
	}
	reqs := e.fake.Requests()
	var body struct {
		Messages []struct {
			Role    string            `json:"role"`
			Content []json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	must(t, json.Unmarshal(reqs[len(reqs)-1].Body, &body))
	lastUser := body.Messages[len(body.Messages)-1]
	if lastUser.Role != "user" || !strings.Contains(string(lastUser.Content[0]), "interrupted") ||
		!strings.Contains(string(lastUser.Content[len(lastUser.Content)-1]), "go on") {
		t.Fatalf("repaired last message %s", lastUser.Content)
	}
}

// A refusal of the model call (a spent budget, a rate limit) ends the turn
// with an error output saying so, and done "error".
func TestModelRefusalBecomesAnErrorOutput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, `
answers:
  - fault: {kind: status, status: 429, message: "token budget of project WEB is spent until 2026-12-01T00:00:00Z"}
`)
	e.start()
	s := e.session()
	outs := e.waitDone(s, e.send(s, "plan it").Turn)
	n := len(outs)
	if outs[n-1].Text != "error" || outs[n-2].Type != store.OutputError || !strings.Contains(outs[n-2].Text, "token budget of project WEB is spent") {
		t.Fatalf("outputs %+v", outs)
	}
}

// A gateway that answers 503 (its database is restarting) is waited out,
// after each answer's Retry-After: the turn goes on once it answers, and
// nothing of the wait shows but time.
func TestAnUnavailableGatewayIsWaitedOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t, `
answers:
  - fault: {kind: status, status: 503, retry_after: 1, message: "the database is unavailable; retry in 1 seconds"}
  - fault: {kind: status, status: 503, retry_after: 1, message: "the database is unavailable; retry in 1 seconds"}
  - content:
      - text: "Here is the plan."
`)
	e.start()
	s := e.session()
	outs := e.waitDone(s, e.send(s, "plan it").Turn)
	for _, o := range outs {
		if o.Type == store.OutputError {
			t.Fatalf("the turn failed: %+v", outs)
		}
	}
	if last := outs[len(outs)-1]; last.Text != "end_turn" {
		t.Fatalf("done %q, want end_turn (outputs %+v)", last.Text, outs)
	}
	if n := len(e.fake.Requests()); n != 3 {
		t.Fatalf("%d model calls, want 3", n)
	}
}

// Past worker.model_unavailable_for, the turn fails as on any refusal.
func TestAGatewayUnavailableForTooLongFailsTheTurn(t *testing.T) {
	t.Parallel()
	e := newEnv(t, `
answers:
  - fault: {kind: status, status: 503, retry_after: 1, message: "the database is unavailable; retry in 1 seconds"}
  - content:
      - text: "too late"
`)
	e.start(func(c *worker.Config, _ *worker.PlannerConfig) { c.ModelUnavailableFor = 0 })
	s := e.session()
	outs := e.waitDone(s, e.send(s, "plan it").Turn)
	n := len(outs)
	if outs[n-1].Text != "error" || outs[n-2].Type != store.OutputError || !strings.Contains(outs[n-2].Text, "the database is unavailable") {
		t.Fatalf("outputs %+v", outs)
	}
}
