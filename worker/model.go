package worker

import (
	"context"

	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/store"
)

// GatewayModel makes the planner's model calls through the gateway client,
// streamed; cancelling ctx closes the call at once.
type GatewayModel struct {
	Client *llm.Client
}

// Call streams one answer, calling onText (when not nil) for each text piece.
func (g GatewayModel) Call(ctx context.Context, who llm.Principal, req llm.MessageRequest, onText func(string)) (*llm.MessageResponse, error) {
	s, err := g.Client.Stream(ctx, who, req)
	if err != nil {
		return nil, err
	}
	return s.Collect(onText)
}

// callModel streams one model answer, publishing text as it arrives, and
// stores it with a tool_call output per tool call.
func (a *attempt) callModel(ctx context.Context, h store.History) error {
	req := llm.MessageRequest{
		Model:     a.w.planner.Model,
		MaxTokens: a.w.planner.MaxTokens,
		System:    llm.Content{{Type: llm.BlockText, Text: a.system}},
		Messages:  a.messages(h),
		Tools:     a.toolDefs(),
		Stream:    true,
	}
	if a.w.planner.PromptCaching {
		markCacheBreakpoints(&req)
	}
	resp, err := a.w.d.Model.Call(ctx, a.principal(), req, func(delta string) {
		a.w.d.Publisher.Publish(ctx, store.Output{Session: a.fence.Session, Turn: a.fence.Turn, Type: store.OutputText, Text: delta})
	})
	if err != nil {
		return err
	}
	content, refused := screenAnswer(fromModel(resp.Content), a.w.planner.MaxToolInputBytes)
	stop, _ := replaceNULs(resp.StopReason)
	msg := store.Message{Role: "assistant", Content: content, StopReason: stop,
		Usage: store.MessageUsage{InputTokens: resp.Usage.InputTokens, OutputTokens: resp.Usage.OutputTokens,
			CacheReadTokens: resp.Usage.CacheReadInputTokens, CacheWriteTokens: resp.Usage.CacheCreationInputTokens}}
	if err := a.uniqueToolUseIDs(ctx, msg.Content); err != nil {
		return err
	}
	var extra []store.Output
	for _, b := range msg.Content {
		if b.Type == store.BlockToolUse {
			extra = append(extra, store.Output{Turn: a.fence.Turn, Type: store.OutputToolCall, Tool: b.Name, ToolUseID: b.ToolUseID, Input: b.Input})
		}
	}
	if len(extra) == 0 {
		a.final = &msg // stored with the done
		return nil
	}
	_, outs, err := a.w.transcript.AppendAnswer(context.WithoutCancel(ctx), a.fence, msg, refusedCalls(msg.Content, refused), extra...)
	if err != nil {
		return err
	}
	a.w.d.Publisher.Publish(ctx, outs...)
	return nil
}

// messages is the model's view: the summary, then the repaired history.
func (a *attempt) messages(h store.History) []llm.Message {
	msgs := toModel(h.Messages)
	if h.Summary != "" {
		msgs = append([]llm.Message{{Role: llm.RoleUser, Content: llm.Content{
			{Type: llm.BlockText, Text: summaryMessage(h.Summary)}}}}, msgs...)
	}
	return repair(msgs)
}

func (a *attempt) toolDefs() []llm.Tool {
	defs := a.w.d.Tools.Definitions()
	out := make([]llm.Tool, len(defs))
	for i, d := range defs {
		out[i] = llm.Tool{Name: d.Name, Description: d.Description, InputSchema: d.InputSchema}
	}
	return out
}
