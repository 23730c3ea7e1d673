package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tools"
)

// toolCallStore is what a turn keeps of its tool calls, the at-most-once
// record keyed by tool_use_id; the store (*store.DB) provides it.
type toolCallStore interface {
	ClaimToolCall(ctx context.Context, f store.Fence, toolUseID, name string, input json.RawMessage) (store.ToolCall, bool, error)
	CompleteToolCall(ctx context.Context, f store.Fence, tc store.ToolCall) (store.ToolCall, []store.Output, error)
	UsedToolUseIDs(ctx context.Context, sessionID string, ids []string) ([]string, error)
}

// runTools runs the answer's tool calls in order as the human, each at most
// once across attempts (keyed by tool_use_id), then stores the results.
func (a *attempt) runTools(ctx context.Context, calls []store.Block) error {
	results := make([]store.Block, 0, len(calls))
	for _, c := range calls {
		tc, err := a.runTool(ctx, c)
		if err != nil {
			return err
		}
		results = append(results, store.Block{Type: store.BlockToolResult, ToolUseID: c.ToolUseID, Text: tc.Result, IsError: tc.IsError})
		if a.cancelled(ctx) {
			break
		}
	}
	if len(results) < len(calls) {
		return nil // cancelled: the loop ends the turn; repair answers the rest
	}
	_, outs, err := a.w.transcript.AppendMessage(context.WithoutCancel(ctx), a.fence, store.Message{Role: "user", Content: results})
	if err != nil {
		return err
	}
	a.publish(ctx, outs...)
	return nil
}

// runTool runs one tool call, unless its result is stored already, and
// returns the stored call. A tool that writes to Postgres stores its result
// in the transaction of its effect (tools.Env.Record), so a call claimed by
// an attempt that died without a result had no effect, and runs again. The
// call is authorized against the human's bindings as they are now.
func (a *attempt) runTool(ctx context.Context, c store.Block) (tc store.ToolCall, err error) {
	ctx, span := startTool(ctx, c)
	ran := false
	defer func() { endTool(span, tc, ran, err) }()
	tc, _, err = a.w.toolCalls.ClaimToolCall(ctx, a.fence, c.ToolUseID, c.Name, c.Input)
	if err != nil || tc.Done {
		return tc, err
	}
	ran = true
	a.human = nil
	caller, err := a.caller(ctx)
	if err != nil {
		return tc, err
	}
	hooks := hooksFor(a.fence.Session)
	var recorded []store.Output
	env := tools.Env{DB: a.w.toolDB, Caller: caller, Project: a.project, Session: a.fence.Session,
		Record: func(ctx context.Context, tx pgx.Tx, res tools.Result) error {
			if err := hooks.beforeCommit(ctx, c.ToolUseID); err != nil {
				return err
			}
			if err := store.HoldBindings(ctx, tx, caller.Principal); err != nil {
				return err
			}
			outs, err := store.RecordToolResult(ctx, tx, a.fence, store.ToolCall{ToolUseID: c.ToolUseID, Name: c.Name,
				Result: res.Text, IsError: res.IsError})
			recorded = outs
			return err
		}}
	if a.w.d.Embedders != nil {
		// The planner's searches embed their queries metered to the session's project.
		env.Embedder = a.w.d.Embedders(a.project.OrganizationID, a.project.ID)
	}
	started := time.Now()
	res := a.w.d.Tools.Call(ctx, env, c.Name, c.Input)
	a.w.metrics.toolCall(c.Name, res.IsError, time.Since(started))
	if ctx.Err() != nil && res.IsError {
		if !errors.Is(context.Cause(ctx), errCancelled) {
			// Shutdown or a lost lease: nothing was stored, so the attempt
			// that resumes the turn runs the call again.
			return tc, fmt.Errorf("worker: tool %s: %w", c.Name, context.Cause(ctx))
		}
		res.Text = `{"error":"cancelled while running; the call did not complete"}`
	}
	tc.Result, tc.IsError = res.Text, res.IsError
	var outs []store.Output
	tc, outs, err = a.w.toolCalls.CompleteToolCall(context.WithoutCancel(ctx), a.fence, tc)
	if err != nil {
		return tc, err
	}
	if len(outs) == 0 {
		outs = recorded // stored with the tool's effect
	}
	a.publish(ctx, outs...)
	hooks.afterResult(c.ToolUseID)
	return tc, nil
}

// uniqueToolUseIDs gives every tool call of an answer an id of its own in
// the session: the id keys the call's at-most-once record, and some
// upstreams leave ids empty or repeat them.
func (a *attempt) uniqueToolUseIDs(ctx context.Context, blocks []store.Block) error {
	var ids []string
	for _, b := range blocks {
		if b.Type == store.BlockToolUse && b.ToolUseID != "" {
			ids = append(ids, b.ToolUseID)
		}
	}
	taken := map[string]bool{}
	if len(ids) > 0 {
		used, err := a.w.toolCalls.UsedToolUseIDs(ctx, a.fence.Session, ids)
		if err != nil {
			return err
		}
		for _, id := range used {
			taken[id] = true
		}
	}
	for i := range blocks {
		b := &blocks[i]
		if b.Type != store.BlockToolUse {
			continue
		}
		if b.ToolUseID == "" || taken[b.ToolUseID] || strings.ContainsRune(b.ToolUseID, 0) {
			b.ToolUseID = "toolu_ballet_" + strings.ReplaceAll(uuid.NewString(), "-", "")
		}
		taken[b.ToolUseID] = true
	}
	return nil
}
