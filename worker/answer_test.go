package worker_test

import (
	"context"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/worker"
)

// A NUL character cannot be stored by Postgres (text or jsonb). An answer
// holding one is stored with the NULs replaced and a note saying so, a tool
// call holding one is refused with an error result instead of being run,
// and the turn goes on with one model call per round and no retries.
func TestNULsFromTheModelAreReplacedAndTheTurnGoesOn(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		answer     string
		calls      int    // model calls the turn makes
		wantText   string // in the stored answer
		wantResult string // in the tool result, when a tool was called
	}{
		{name: "text", answer: `- text: "before\0after"`, calls: 1, wantText: "before\uFFFDafter"},
		{name: "tool input", answer: `- tool_use: {name: lookup, input: {q: "a\0b"}}`, calls: 2,
			wantResult: "tool input contains NUL characters"},
		{name: "tool name", answer: `- tool_use: {name: "look\0up", input: {q: a}}`, calls: 2,
			wantResult: "tool name contains NUL characters"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, `
answers:
  - match: 'tool_result'
    content:
      - text: "Noted."
  - match: '^go'
    content:
      `+tc.answer+`
`)
			e.start()
			s := e.session()
			turn := e.send(s, "go").Turn
			outs := e.waitDone(s, turn)
			if done := outs[len(outs)-1]; done.Text != store.ReasonEndTurn {
				t.Fatalf("done %q, want end_turn: %+v", done.Text, outs)
			}
			if n := len(e.fake.Requests()); n != tc.calls {
				t.Errorf("%d model calls, want %d", n, tc.calls)
			}
			var attempts int
			must(t, e.db.Pool().QueryRow(context.Background(), `SELECT attempts FROM planner_turns WHERE id = $1`, turn).Scan(&attempts))
			if attempts != 1 {
				t.Errorf("the turn ran %d times, want 1", attempts)
			}
			if n := e.calledTimes("lookup"); n != 0 {
				t.Errorf("lookup ran %d times, want 0", n)
			}
			sess, err := e.db.GetSession(context.Background(), e.human, s)
			must(t, err)
			answer := sess.Messages[1]
			var text, note strings.Builder
			for _, b := range answer.Content {
				switch b.Type {
				case store.BlockText:
					text.WriteString(b.Text)
				case store.BlockToolUse:
					text.WriteString(b.Name + string(b.Input))
				}
				if strings.Contains(b.Text, "NUL") {
					note.WriteString(b.Text)
				}
			}
			if strings.ContainsRune(text.String(), 0) || !strings.Contains(text.String(), "\uFFFD") {
				t.Errorf("stored answer %q: want NULs replaced with U+FFFD", text.String())
			}
			if tc.wantText != "" && !strings.Contains(text.String(), tc.wantText) {
				t.Errorf("stored answer %q, want %q", text.String(), tc.wantText)
			}
			if tc.wantResult == "" {
				if note.Len() == 0 {
					t.Errorf("stored answer %+v has no note about the replaced NULs", answer.Content)
				}
				return
			}
			var result *store.Output
			for i := range outs {
				if outs[i].Type == store.OutputToolResult {
					result = &outs[i]
				}
			}
			if result == nil || !result.IsError || !strings.Contains(result.Text, tc.wantResult) {
				t.Fatalf("tool result %+v, want an error saying %q", result, tc.wantResult)
			}
		})
	}
}

// One huge tool input must not break the session: it is refused as an
// error result, a small placeholder is stored in its place, and the next
// turn's request stays small.
func TestHugeToolInputIsRefusedAndTheSessionStaysUsable(t *testing.T) {
	t.Parallel()
	const size = 300 << 10 // over the default limit of 256 KiB
	e := newEnv(t, `
answers:
  - match: 'tool_result lookup'
    content:
      - text: "That was too big."
  - match: '^big'
    chunk_size: 1048576
    content:
      - tool_use: {name: lookup, input: {q: "`+strings.Repeat("x", size)+`"}}
  - match: '^next'
    content:
      - text: "ok"
`)
	e.start()
	s := e.session()
	outs := e.waitDone(s, e.send(s, "big").Turn)
	if done := outs[len(outs)-1]; done.Text != store.ReasonEndTurn {
		t.Fatalf("done %q: %v", done.Text, types(outs))
	}
	var result *store.Output
	for i := range outs {
		switch o := outs[i]; o.Type {
		case store.OutputToolResult:
			result = &outs[i]
		case store.OutputToolCall:
			if len(o.Input) > 1024 {
				t.Errorf("tool_call output holds an input of %d bytes", len(o.Input))
			}
		}
	}
	want := "exceeds the limit of 262144"
	if result == nil || !result.IsError || !strings.Contains(result.Text, "tool input of ") || !strings.Contains(result.Text, want) {
		t.Fatalf("tool result %+v, want an error saying %q", result, want)
	}
	if n := e.calledTimes("lookup"); n != 0 {
		t.Errorf("lookup ran %d times, want 0", n)
	}
	outs = e.waitDone(s, e.send(s, "next").Turn)
	if done := outs[len(outs)-1]; done.Text != store.ReasonEndTurn {
		t.Fatalf("next turn: done %q: %v", done.Text, types(outs))
	}
	reqs := e.fake.Requests()
	if n := len(reqs[len(reqs)-1].Body); n > 64<<10 {
		t.Fatalf("the next turn's request is %d bytes; the huge input is still in the history", n)
	}
}

func TestMaxToolInputBytesIsValidated(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		value int
		ok    bool
	}{{0, false}, {-1, false}, {1023, false}, {1024, true}, {262144, true}} {
		c := worker.DefaultPlannerConfig()
		c.MaxToolInputBytes = tc.value
		err := c.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("max_tool_input_bytes %d: error %v, want ok=%v", tc.value, err, tc.ok)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "planner.max_tool_input_bytes:") {
			t.Errorf("error %q does not name the key", err)
		}
	}
}
