package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/balletplanner/ballet/store"
)

// toolCallRows renders a session's rows with its tool calls.
func (f *trackerFixture) toolCallRows(t *testing.T, session string) string {
	t.Helper()
	var calls string
	if err := f.db.Pool().QueryRow(context.Background(), `SELECT COALESCE(string_agg(concat_ws(',', tool_use_id,
		status, result, is_error), ';' ORDER BY tool_use_id), '') FROM planner_tool_calls WHERE session_id = $1`,
		session).Scan(&calls); err != nil {
		t.Fatal(err)
	}
	return f.sessionRows(t, session) + " | " + calls
}

// TestStaleFenceToolCallWritesNothing: a model answer, a tool call's claim
// and its result, written with a fence that lost its lease, fail with the
// lease-lost error and leave the session's rows and tool calls as they were.
func TestStaleFenceToolCallWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newTrackerFixture(t)
	input := json.RawMessage(`{}`)
	writes := []struct {
		name, err string
		write     func(store.Fence) error
	}{
		{"AppendAnswer", "store: append answer: store: session lease lost", func(fe store.Fence) error {
			_, _, err := f.db.AppendAnswer(ctx, fe, store.Message{Role: "assistant", Content: []store.Block{{
				Type: store.BlockToolUse, ToolUseID: "toolu_big", Name: "list_runnable", Input: input}}},
				[]store.ToolCall{{ToolUseID: "toolu_big", Name: "list_runnable", Input: input, Result: "too large", IsError: true}})
			return err
		}},
		{"ClaimToolCall", "store: claim tool call: store: session lease lost", func(fe store.Fence) error {
			_, _, err := f.db.ClaimToolCall(ctx, fe, "toolu_new", "list_runnable", input)
			return err
		}},
		{"CompleteToolCall", "store: complete tool call: store: session lease lost", func(fe store.Fence) error {
			_, _, err := f.db.CompleteToolCall(ctx, fe, store.ToolCall{ToolUseID: "toolu_1", Name: "list_runnable", Result: "late"})
			return err
		}},
	}
	stale := map[string]func(t *testing.T, c store.Claim, res store.SendResult){
		"taken over": func(t *testing.T, c store.Claim, res store.SendResult) {
			if err := f.db.HandBack(ctx, c.Fence); err != nil {
				t.Fatal(err)
			}
			if next, err := f.db.ClaimTurn(ctx, res.Turn, "worker-b", time.Minute); err != nil || next.State != store.ClaimRun {
				t.Fatalf("take over: %v, %+v", err, next)
			}
		},
		"turn ended": func(t *testing.T, c store.Claim, _ store.SendResult) {
			if _, _, err := f.db.FinishTurn(ctx, c.Fence, store.TurnOutcome{Status: store.TurnDone, Reason: "end_turn"}, nil); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, makeStale := range stale {
		for _, w := range writes {
			t.Run(name+"/"+w.name, func(t *testing.T) {
				t.Parallel()
				c, res := f.claimed(t, "worker-a")
				if _, fresh, err := f.db.ClaimToolCall(ctx, c.Fence, "toolu_1", "list_runnable", input); err != nil || !fresh {
					t.Fatalf("claim of toolu_1: fresh %v, %v", fresh, err)
				}
				makeStale(t, c, res)
				before := f.toolCallRows(t, c.Fence.Session)
				err := w.write(c.Fence)
				if !errors.Is(err, store.ErrLeaseLost) || err.Error() != w.err {
					t.Fatalf("stale write: %v, want %q", err, w.err)
				}
				if after := f.toolCallRows(t, c.Fence.Session); after != before {
					t.Fatalf("a stale write changed the session:\nbefore %s\nafter  %s", before, after)
				}
			})
		}
	}
}

// TestToolCallRunsOnce: a claimed call is not fresh when claimed again; its
// result is stored once, with one tool_result output; a second result keeps
// the first and takes no cursor; a refused call of an answer is done with
// its error and never claimed fresh.
func TestToolCallRunsOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newTrackerFixture(t)
	c, _ := f.claimed(t, "worker-a")
	fe := c.Fence
	input := json.RawMessage(`{"x":1}`)
	claim := func(id string) (store.ToolCall, bool) {
		t.Helper()
		tc, fresh, err := f.db.ClaimToolCall(ctx, fe, id, "list_runnable", input)
		if err != nil {
			t.Fatal(err)
		}
		return tc, fresh
	}
	render := func(outs []store.Output) string {
		var parts []string
		for _, o := range outs {
			parts = append(parts, fmt.Sprintf("%d:%s:%s:%s:%v", o.Cursor, o.Type, o.ToolUseID, o.Text, o.IsError))
		}
		return strings.Join(parts, " ")
	}

	if tc, fresh := claim("toolu_1"); !fresh || tc.Done {
		t.Fatalf("first claim: fresh %v, %+v", fresh, tc)
	}
	if tc, fresh := claim("toolu_1"); fresh || tc.Done || tc.Result != "" {
		t.Fatalf("claim of a running call: fresh %v, %+v", fresh, tc)
	}
	tc, outs, err := f.db.CompleteToolCall(ctx, fe, store.ToolCall{ToolUseID: "toolu_1", Name: "list_runnable", Result: "[1]"})
	if err != nil {
		t.Fatal(err)
	}
	// Cursor 1 is the queued output, 2 the started.
	if got, want := render(outs), "3:tool_result:toolu_1:[1]:false"; got != want || !tc.Done || tc.Result != "[1]" {
		t.Fatalf("complete: %s (%+v), want %s", got, tc, want)
	}
	rows := f.toolCallRows(t, fe.Session)
	tc, outs, err = f.db.CompleteToolCall(ctx, fe, store.ToolCall{ToolUseID: "toolu_1", Name: "list_runnable", Result: "[2]", IsError: true})
	if err != nil || len(outs) != 0 || !tc.Done || tc.Result != "[1]" || tc.IsError {
		t.Fatalf("second result: %+v, outputs %s, %v; want the first kept, no output", tc, render(outs), err)
	}
	if after := f.toolCallRows(t, fe.Session); after != rows {
		t.Fatalf("a second result changed the session:\nbefore %s\nafter  %s", rows, after)
	}
	if tc, fresh := claim("toolu_1"); fresh || !tc.Done || tc.Result != "[1]" {
		t.Fatalf("claim of a done call: fresh %v, %+v", fresh, tc)
	}

	answer := store.Message{Role: "assistant", Content: []store.Block{
		{Type: store.BlockToolUse, ToolUseID: "toolu_2", Name: "list_runnable", Input: input},
		{Type: store.BlockToolUse, ToolUseID: "toolu_big", Name: "list_runnable", Input: input}}, StopReason: "tool_use"}
	m, outs, err := f.db.AppendAnswer(ctx, fe, answer,
		[]store.ToolCall{{ToolUseID: "toolu_big", Name: "list_runnable", Input: input, Result: "input too large", IsError: true}},
		store.Output{Turn: fe.Turn, Type: store.OutputToolCall, Tool: "list_runnable", ToolUseID: "toolu_2", Input: input},
		store.Output{Turn: fe.Turn, Type: store.OutputToolCall, Tool: "list_runnable", ToolUseID: "toolu_big", Input: input})
	if err != nil {
		t.Fatal(err)
	}
	want := "4:message:::false 5:tool_call:toolu_2::false 6:tool_call:toolu_big::false 7:tool_result:toolu_big:input too large:true"
	if got := render(outs); got != want || outs[0].Seq != m.Seq || outs[0].Role != "assistant" {
		t.Fatalf("answer outputs: %s (message seq %d, role %q), want %s", got, outs[0].Seq, outs[0].Role, want)
	}
	stored, err := f.db.Outputs(ctx, fe.Session, 3, 10)
	if err != nil {
		t.Fatal(err)
	}
	if got := render(stored); got != want {
		t.Fatalf("stored answer outputs: %s, want %s", got, want)
	}
	if tc, fresh := claim("toolu_big"); fresh || !tc.Done || tc.Result != "input too large" || !tc.IsError {
		t.Fatalf("claim of a refused call: fresh %v, %+v", fresh, tc)
	}
	if _, fresh := claim("toolu_2"); !fresh {
		t.Fatal("the answer's other call was not fresh")
	}
}
