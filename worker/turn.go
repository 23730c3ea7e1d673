package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tools"
)

// run is one attempt at a turn. Every step is driven by what is stored, so
// an attempt that follows a crash resumes where the dead one stopped.
type run struct {
	w      *Worker
	claim  store.Claim
	fence  store.Fence
	log    *slog.Logger
	rounds int

	system        string
	project       store.Project
	human         *store.Caller
	compactedOnce bool
	// final is the model's last answer (no tool calls): it is stored with
	// the turn's done, in one transaction.
	final *store.Message
}

// loop runs rounds until the turn ends. It returns the turn's final status
// and done reason, and the text of an error output; an empty status means
// an internal failure that asynq should retry.
func (r *run) loop(ctx context.Context) (status, reason, errText string) {
	if err := r.prepare(ctx); err != nil {
		return r.fail(ctx, err)
	}
	for {
		if errors.Is(context.Cause(ctx), errCancelled) {
			return store.TurnCancelled, store.ReasonCancelled, ""
		}
		h, err := r.w.d.DB.LoadHistory(ctx, r.fence.Session, r.claim.Turn.Position)
		if err != nil {
			return r.fail(ctx, err)
		}
		if h.CancelRequested(r.fence.Turn) {
			return store.TurnCancelled, store.ReasonCancelled, ""
		}
		mine := turnMessages(h.Messages, r.fence.Turn)
		r.rounds = countRole(mine, "assistant")
		last := mine[len(mine)-1]
		if last.Role == "assistant" {
			calls := toolUses(last)
			if len(calls) == 0 {
				reason := last.StopReason
				if reason == "" {
					reason = store.ReasonEndTurn
				}
				return store.TurnDone, reason, ""
			}
			if done := countToolRounds(mine); done >= r.w.planner.MaxRounds {
				return store.TurnDone, store.ReasonMaxRounds, fmt.Sprintf(
					"The turn stopped after %d tool rounds (planner.max_rounds); its last tool calls were not run. Send a new message to continue.", done)
			}
			if err := r.runTools(ctx, calls); err != nil {
				return r.fail(ctx, err)
			}
			continue
		}
		if r.shouldCompact(h) {
			h, err = r.compact(ctx, h)
			if err != nil {
				return r.fail(ctx, err)
			}
		}
		if err := r.callModel(ctx, h); err != nil {
			return r.fail(ctx, err)
		}
		if r.final != nil {
			r.rounds++
			reason := r.final.StopReason
			if reason == "" {
				reason = store.ReasonEndTurn
			}
			return store.TurnDone, reason, ""
		}
	}
}

// prepare builds the system prompt: instructions, project and organization,
// and the resolved planner skill as the human sees it. Prompts are cached
// per project and human for promptTTL, so a burst of turns reads them once.
func (r *run) prepare(ctx context.Context) error {
	s := r.claim.Session
	key := s.ProjectID + "\x00" + r.claim.Turn.Author
	if p, ok := r.w.prompts.get(key); ok {
		r.project, r.system = p.project, p.system
		return nil
	}
	p, err := r.w.d.DB.ProjectByKey(ctx, s.Project)
	if err != nil {
		return err
	}
	o, err := r.w.d.DB.OrganizationByKey(ctx, s.OrganizationID)
	if err != nil {
		return err
	}
	r.project = p
	var skill string
	var version int
	if name := r.w.planner.Skill; name != "" {
		caller, err := r.caller(ctx)
		if err != nil {
			return err
		}
		res, err := r.w.d.DB.ResolveSkill(ctx, caller, p.Key, name)
		switch {
		case err == nil:
			skill, version = res.Body, res.ResolvedVersion
		case !store.IsCode(err, store.CodeNotFound):
			r.log.WarnContext(ctx, "resolve planner skill; going on without it", slog.Any("error", err))
		}
	}
	r.system = systemPrompt(p.Key, p.Name, p.Description, o.Name, r.claim.Turn.Author, r.w.planner.Skill, version, skill)
	r.w.prompts.put(key, prompt{project: p, system: r.system})
	return nil
}

// caller is the human the planner acts for, with the planner as actor; it
// is read once per attempt.
func (r *run) caller(ctx context.Context) (store.Caller, error) {
	if r.human != nil {
		return *r.human, nil
	}
	p, err := r.w.d.DB.Principal(ctx, r.claim.Turn.Author)
	if err != nil {
		return store.Caller{}, err
	}
	r.human = &store.Caller{Principal: p, Actor: store.PlannerActor(r.fence.Session, r.claim.Turn.Author)}
	return *r.human, nil
}

// fail turns an error into the turn's end. Cancellation and a lost lease win
// over whatever error they caused; a model or gateway refusal ends the turn
// with an error output; anything else is retried by asynq.
func (r *run) fail(ctx context.Context, err error) (string, string, string) {
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, errCancelled) || (ctx.Err() == nil && r.cancelled(ctx)):
		return store.TurnCancelled, store.ReasonCancelled, ""
	case errors.Is(cause, errTimedOut):
		return store.TurnFailed, store.ReasonError, fmt.Sprintf("The turn took longer than %s and was stopped.", r.w.cfg.TurnTimeout)
	case ctx.Err() != nil:
		return "", "", err.Error() // the handler decides: shutdown, lease lost
	}
	var api *llm.APIError
	if errors.As(err, &api) {
		r.log.WarnContext(ctx, "model call refused", slog.Int("status", api.Status), slog.String("type", api.Type),
			slog.String("message", api.Message))
		return store.TurnFailed, store.ReasonError, "The model call failed: " + api.Message
	}
	if errors.Is(err, store.ErrLeaseLost) {
		return "", "", err.Error()
	}
	r.log.ErrorContext(ctx, "turn failed", slog.Any("error", err))
	return "", "", err.Error()
}

// cancelled reports whether the turn was cancelled: the nudge cancels ctx,
// and the durable flag is checked between steps in case a nudge was lost.
func (r *run) cancelled(ctx context.Context) bool {
	if errors.Is(context.Cause(ctx), errCancelled) {
		return true
	}
	yes, err := r.w.d.DB.CancelRequested(ctx, r.fence.Turn)
	return err == nil && yes
}

// callModel streams one model answer, publishing text as it arrives, and
// stores it with a tool_call output per tool call.
func (r *run) callModel(ctx context.Context, h store.History) error {
	req := llm.MessageRequest{
		Model:     r.w.planner.Model,
		MaxTokens: r.w.planner.MaxTokens,
		System:    llm.Content{{Type: llm.BlockText, Text: r.system}},
		Messages:  r.messages(h),
		Tools:     r.toolDefs(),
		Stream:    true,
	}
	resp, err := r.w.d.Model.Call(ctx, r.principal(), req, func(delta string) {
		r.w.d.Publisher.Publish(ctx, store.Output{Session: r.fence.Session, Turn: r.fence.Turn, Type: store.OutputText, Text: delta})
	})
	if err != nil {
		return err
	}
	content, refused := screenAnswer(fromModel(resp.Content), r.w.planner.MaxToolInputBytes)
	stop, _ := replaceNULs(resp.StopReason)
	msg := store.Message{Role: "assistant", Content: content, StopReason: stop,
		Usage: store.MessageUsage{InputTokens: resp.Usage.InputTokens, OutputTokens: resp.Usage.OutputTokens,
			CacheReadTokens: resp.Usage.CacheReadInputTokens, CacheWriteTokens: resp.Usage.CacheCreationInputTokens}}
	if err := r.uniqueToolUseIDs(ctx, msg.Content); err != nil {
		return err
	}
	var extra []store.Output
	for _, b := range msg.Content {
		if b.Type == store.BlockToolUse {
			extra = append(extra, store.Output{Turn: r.fence.Turn, Type: store.OutputToolCall, Tool: b.Name, ToolUseID: b.ToolUseID, Input: b.Input})
		}
	}
	if len(extra) == 0 {
		r.final = &msg // stored with the done
		return nil
	}
	_, outs, err := r.w.d.DB.AppendAnswer(context.WithoutCancel(ctx), r.fence, msg, refusedCalls(msg.Content, refused), extra...)
	if err != nil {
		return err
	}
	r.w.d.Publisher.Publish(ctx, outs...)
	return nil
}

// messages is the model's view: the summary, then the repaired history.
func (r *run) messages(h store.History) []llm.Message {
	msgs := toModel(h.Messages)
	if h.Summary != "" {
		msgs = append([]llm.Message{{Role: llm.RoleUser, Content: llm.Content{
			{Type: llm.BlockText, Text: summaryMessage(h.Summary)}}}}, msgs...)
	}
	return repair(msgs)
}

func (r *run) toolDefs() []llm.Tool {
	defs := r.w.d.Tools.Definitions()
	out := make([]llm.Tool, len(defs))
	for i, d := range defs {
		out[i] = llm.Tool{Name: d.Name, Description: d.Description, InputSchema: d.InputSchema}
	}
	return out
}

// runTools runs the answer's tool calls in order as the human, each at most
// once across attempts (keyed by tool_use_id), then stores the results.
func (r *run) runTools(ctx context.Context, calls []store.Block) error {
	results := make([]store.Block, 0, len(calls))
	for _, c := range calls {
		tc, err := r.runTool(ctx, c)
		if err != nil {
			return err
		}
		results = append(results, store.Block{Type: store.BlockToolResult, ToolUseID: c.ToolUseID, Text: tc.Result, IsError: tc.IsError})
		if r.cancelled(ctx) {
			break
		}
	}
	if len(results) < len(calls) {
		return nil // cancelled: the loop ends the turn; repair answers the rest
	}
	_, outs, err := r.w.d.DB.AppendMessage(context.WithoutCancel(ctx), r.fence, store.Message{Role: "user", Content: results})
	if err != nil {
		return err
	}
	r.w.d.Publisher.Publish(ctx, outs...)
	return nil
}

// runTool runs one tool call, unless its result is stored already, and
// returns the stored call. A tool that writes to Postgres stores its result
// in the transaction of its effect (tools.Env.Record), so a call claimed by
// an attempt that died without a result had no effect, and runs again. The
// call is authorized against the human's bindings as they are now.
func (r *run) runTool(ctx context.Context, c store.Block) (store.ToolCall, error) {
	tc, _, err := r.w.d.DB.ClaimToolCall(ctx, r.fence, c.ToolUseID, c.Name, c.Input)
	if err != nil || tc.Done {
		return tc, err
	}
	r.human = nil
	caller, err := r.caller(ctx)
	if err != nil {
		return tc, err
	}
	hooks := hooksFor(r.fence.Session)
	var recorded []store.Output
	env := tools.Env{DB: r.w.d.DB, Caller: caller, Project: r.project, Session: r.fence.Session,
		Record: func(ctx context.Context, tx pgx.Tx, res tools.Result) error {
			if err := hooks.beforeCommit(ctx, c.ToolUseID); err != nil {
				return err
			}
			if err := store.HoldBindings(ctx, tx, caller.Principal); err != nil {
				return err
			}
			outs, err := store.RecordToolResult(ctx, tx, r.fence, store.ToolCall{ToolUseID: c.ToolUseID, Name: c.Name,
				Result: res.Text, IsError: res.IsError})
			recorded = outs
			return err
		}}
	started := time.Now()
	res := r.w.d.Tools.Call(ctx, env, c.Name, c.Input)
	r.w.metrics.toolCall(c.Name, res.IsError, time.Since(started))
	if ctx.Err() != nil && res.IsError {
		if !errors.Is(context.Cause(ctx), errCancelled) {
			// Shutdown or a lost lease: nothing was stored, so the attempt
			// that resumes the turn runs the call again.
			return tc, fmt.Errorf("worker: tool %s: %w", c.Name, context.Cause(ctx))
		}
		res.Text = `{"error":"cancelled while running; the call did not complete"}`
	}
	tc.Result, tc.IsError = res.Text, res.IsError
	tc, outs, err := r.w.d.DB.CompleteToolCall(context.WithoutCancel(ctx), r.fence, tc)
	if err != nil {
		return tc, err
	}
	if len(outs) == 0 {
		outs = recorded // stored with the tool's effect
	}
	r.w.d.Publisher.Publish(ctx, outs...)
	hooks.afterResult(c.ToolUseID)
	return tc, nil
}

// uniqueToolUseIDs gives every tool call of an answer an id of its own in
// the session: the id keys the call's at-most-once record, and some
// upstreams leave ids empty or repeat them.
func (r *run) uniqueToolUseIDs(ctx context.Context, blocks []store.Block) error {
	var ids []string
	for _, b := range blocks {
		if b.Type == store.BlockToolUse && b.ToolUseID != "" {
			ids = append(ids, b.ToolUseID)
		}
	}
	taken := map[string]bool{}
	if len(ids) > 0 {
		used, err := r.w.d.DB.UsedToolUseIDs(ctx, r.fence.Session, ids)
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

func turnMessages(msgs []store.Message, turn string) []store.Message {
	for i, m := range msgs {
		if m.Turn == turn {
			return msgs[i:]
		}
	}
	return nil
}

func countRole(msgs []store.Message, role string) int {
	n := 0
	for _, m := range msgs {
		if m.Role == role {
			n++
		}
	}
	return n
}

// countToolRounds is how many rounds of tool results the turn stored.
func countToolRounds(msgs []store.Message) int {
	n := 0
	for _, m := range msgs {
		if m.Role == "user" && len(m.Content) > 0 && m.Content[0].Type == store.BlockToolResult {
			n++
		}
	}
	return n
}

func toolUses(m store.Message) []store.Block {
	var out []store.Block
	for _, b := range m.Content {
		if b.Type == store.BlockToolUse {
			out = append(out, b)
		}
	}
	return out
}
