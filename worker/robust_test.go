package worker_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/balletplanner/ballet/gateway/fakellm"
	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/internal/porttest"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/worker"
)

func TestEmptyModelAnswerEndsTheTurn(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "answers:\n  - stop_reason: end_turn\n")
	e.start()
	s := e.session()
	outs := e.waitDone(s, e.send(s, "hello").Turn)
	if outs[len(outs)-1].Text != "end_turn" {
		t.Fatalf("outputs %v", types(outs))
	}
	if n := len(e.fake.Requests()); n != 1 {
		t.Fatalf("%d model calls, want 1", n)
	}
}

// An upstream that repeats tool_use ids must not make a later call reuse an
// earlier call's result: every call runs, with an id of its own.
func TestRepeatedToolUseIDsStillRunEachCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t, `
answers:
  - match: 'tool_result lookup'
    content:
      - text: "Done."
  - match: '.'
    content:
      - tool_use: {id: same, name: lookup, input: {q: a}}
      - tool_use: {id: same, name: lookup, input: {q: b}}
`)
	e.start()
	s := e.session()
	for _, text := range []string{"first", "second"} {
		outs := e.waitDone(s, e.send(s, text).Turn)
		results := 0
		for _, o := range outs {
			if o.Type == store.OutputToolResult {
				results++
			}
		}
		if results != 2 {
			t.Fatalf("turn %q: %d tool results, want 2: %v", text, results, types(outs))
		}
	}
	if n := e.calledTimes("lookup"); n != 4 {
		t.Fatalf("lookup ran %d times, want 4", n)
	}
}

// A turn that keeps failing ends after MaxTurnAttempts with an error output
// instead of calling the model forever.
func TestTurnEndsAfterTooManyAttempts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "loop: true\nanswers:\n  - content:\n      - text: ok\n")
	s := e.session()
	res := e.send(s, "hello")
	if _, err := e.db.Pool().Exec(context.Background(), `UPDATE planner_turns SET attempts = $2 WHERE id = $1`,
		res.Turn, store.MaxTurnAttempts); err != nil {
		t.Fatal(err)
	}
	e.start()
	outs := e.waitDone(s, res.Turn)
	n := len(outs)
	if outs[n-1].Text != "error" || outs[n-2].Type != store.OutputError || !strings.Contains(outs[n-2].Text, "attempts") {
		t.Fatalf("outputs %+v", outs)
	}
	if len(e.fake.Requests()) != 0 {
		t.Fatal("the model was called")
	}
}

func TestCancelAcceptsAnUpperCaseTurnID(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "loop: true\nanswers:\n  - content:\n      - text: ok\n")
	s := e.session()
	turn := e.send(s, "hello").Turn
	res := e.cancel(s, strings.ToUpper(turn))
	if len(res.Outputs) != 1 || res.Outputs[0].Turn != turn {
		t.Fatalf("cancel %+v", res)
	}
}

// asynq cancels a handler's context when its own lease is lost (Redis away)
// or from the dashboard's cancel button; neither is a cancel of ours, so the
// turn is handed back and resumes instead of ending as cancelled.
func TestAsynqCancelHandsTheTurnBack(t *testing.T) {
	t.Parallel()
	// The answer holds after its first deltas until the turn has resumed.
	release := filepath.Join(t.TempDir(), "release")
	e := newEnv(t, fmt.Sprintf(`
loop: true
answers:
  - chunk_size: 2
    chunk_latency: 20ms
    hold_after: 2
    hold_until: %q
    content:
      - text: "An answer that streams in small pieces and holds, so that it is cut."
`, release))
	e.start()
	s := e.session()
	turn := e.send(s, "hello").Turn
	eventually(t, "the model stream to start", func() bool { return e.fake.Active() > 0 })
	// asynq's cancel is best-effort pub/sub: say it until the turn resumes.
	attempts := func() (n int) {
		must(t, e.db.Pool().QueryRow(context.Background(), `SELECT attempts FROM planner_turns WHERE id = $1`, turn).Scan(&n))
		return n
	}
	eventually(t, "the turn to be resumed", func() bool {
		if err := e.queue.Inspector().CancelProcessing(turn); err != nil {
			t.Fatal(err)
		}
		return attempts() >= 2
	})
	must(t, os.WriteFile(release, nil, 0o600))
	outs := e.waitDone(s, turn)
	if done := outs[len(outs)-1]; done.Text != "end_turn" {
		t.Fatalf("done %q, want end_turn: %v", done.Text, types(outs))
	}
	if dones := strings.Count(strings.Join(types(outs), ","), "done"); dones != 1 {
		t.Fatalf("%d done outputs", dones)
	}
}

// hangUp is a gateway that is not there: every connection to addr is
// closed at once, the way a restarting gateway's port behaves, and counted.
type hangUp struct {
	addr  string
	ln    net.Listener
	conns atomic.Int64
}

// hangingGateway makes the env's model calls go to a hangUp, started.
func (e *env) hangingGateway() *hangUp {
	t := e.t
	t.Helper()
	addr := porttest.Addr(t)
	e.deps.Model = worker.GatewayModel{Client: llm.NewClient("http://"+addr, []byte("test-key"), nil)}
	ln, err := net.Listen("tcp", addr)
	must(t, err)
	h := &hangUp{addr: addr, ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			h.conns.Add(1)
			c.Close()
		}
	}()
	t.Cleanup(h.stop)
	return h
}

func (h *hangUp) stop() { h.ln.Close() }

// A gateway that hangs up (restarting, say) gets the model call again,
// within the turn's attempt, until it answers: the turn ends as if nothing
// happened, still on its first attempt.
func TestModelCallsAreMadeAgainWhenTheGatewayHangsUp(t *testing.T) {
	t.Parallel()
	const script = "loop: true\nanswers:\n  - content:\n      - text: back again\n"
	e := newEnv(t, script)
	down := e.hangingGateway()
	e.start(func(c *worker.Config, _ *worker.PlannerConfig) {
		c.ModelRetries, c.ModelRetryWait = 20, 50*time.Millisecond
	})
	s := e.session()
	turn := e.send(s, "hello").Turn
	eventually(t, "the model called again", func() bool { return down.conns.Load() >= 3 })
	down.stop()
	back := fakellm.New(fakellm.MustParse(script))
	must(t, back.StartOn(down.addr))
	t.Cleanup(back.Close)
	e.wantAnsweredInOneAttempt(s, turn, "the retries are the attempt's own")
}

// After worker.model_retries the attempt fails and the turn resumes, as
// after a crash, with retries of its own, until its attempts are used up.
// A new connection is never retried by net/http, so each call is one.
func TestModelRetriesEndWithTheAttempt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "loop: true\nanswers:\n  - content:\n      - text: never\n")
	down := e.hangingGateway()
	e.start(func(c *worker.Config, _ *worker.PlannerConfig) {
		c.ModelRetries, c.ModelRetryWait = 2, time.Millisecond
	})
	s := e.session()
	turn := e.send(s, "hello").Turn
	outs := e.waitDone(s, turn)
	if done := outs[len(outs)-1]; done.Text != store.ReasonError {
		t.Fatalf("done %q, want error: %v", done.Text, types(outs))
	}
	if n, want := down.conns.Load(), int64(3*store.MaxTurnAttempts); n < want {
		t.Fatalf("%d calls over %d attempts, want at least %d: each attempt's call and its 2 retries",
			n, store.MaxTurnAttempts, want)
	}
}

// A cancel stops the waits between retries at once.
func TestCancelStopsTheModelRetries(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "loop: true\nanswers:\n  - content:\n      - text: never\n")
	down := e.hangingGateway()
	// Waits of 30 s, 20 of them: the turn ends in time only if the cancel
	// cuts the first short.
	e.start(func(c *worker.Config, _ *worker.PlannerConfig) { c.ModelRetries, c.ModelRetryWait = 20, 30*time.Second })
	s := e.session()
	turn := e.send(s, "hello").Turn
	eventually(t, "the first call to fail", func() bool { return down.conns.Load() >= 1 })
	e.cancel(s, turn)
	assertCancelled(t, e, s, turn)
	if n := e.attempts(turn); n != 1 {
		t.Fatalf("%d attempts, want 1", n)
	}
}
