package worker

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/internal/tracing"
	"github.com/balletplanner/ballet/store"
)

// charsPerToken is the rough estimate used for text the model has not
// counted yet.
const charsPerToken = 4

// estimate is the context size of the next model call: the last answer's
// reported usage, which covers everything up to it, plus ~4 characters per
// token of what came after; without usage, everything by characters.
func estimate(system string, h store.History) int64 {
	last := -1
	for i, m := range h.Messages {
		if m.Role == "assistant" && m.Usage.InputTokens+m.Usage.OutputTokens > 0 {
			last = i
		}
	}
	var tokens int64
	chars := 0
	rest := h.Messages
	if last >= 0 {
		u := h.Messages[last].Usage
		tokens = u.InputTokens + u.OutputTokens + u.CacheReadTokens + u.CacheWriteTokens
		rest = h.Messages[last+1:]
	} else {
		chars = len(system) + len(h.Summary)
	}
	for _, m := range rest {
		chars += messageChars(m)
	}
	return tokens + int64(chars/charsPerToken)
}

func messageChars(m store.Message) int {
	n := 0
	for _, b := range m.Content {
		n += len(b.Text) + len(b.Name) + len(b.Input)
	}
	return n
}

// shouldCompact: compaction is on, the estimate is over the threshold, it
// was not tried in this turn yet, and there is something before the current
// turn to summarize — so a turn that alone is over the threshold never loops.
func (a *attempt) shouldCompact(h store.History) bool {
	at := a.w.planner.CompactAtTokens
	if at <= 0 || a.compactedOnce {
		return false
	}
	if len(h.Messages) == 0 || h.Messages[0].Turn == a.fence.Turn {
		return false // nothing before the current turn
	}
	return estimate(a.system, h) > int64(at)
}

// compact summarizes everything before the current turn (the earlier
// summary included), stores the summary on the session and reloads the
// history. A failure is logged and the turn goes on uncompacted.
func (a *attempt) compact(ctx context.Context, h store.History) (_ store.History, err error) {
	a.compactedOnce = true
	est := estimate(a.system, h)
	ctx, span := tracing.StartSpan(ctx, tracer, "planner.compact", trace.SpanKindInternal)
	defer func() { tracing.EndSpan(span, err) }()
	if span.IsRecording() {
		span.SetAttributes(attribute.Int64("ballet.estimated_tokens", est))
	}
	var earlier []store.Message
	for _, m := range h.Messages {
		if m.Turn == a.fence.Turn {
			break
		}
		earlier = append(earlier, m)
	}
	upTo := int64(0)
	for _, m := range earlier {
		upTo = max(upTo, m.Seq)
	}
	msgs := toModel(earlier)
	if h.Summary != "" {
		msgs = append([]llm.Message{{Role: llm.RoleUser, Content: llm.Content{
			{Type: llm.BlockText, Text: summaryMessage(h.Summary)}}}}, msgs...)
	}
	msgs = append(msgs, llm.Message{Role: llm.RoleUser, Content: llm.Content{{Type: llm.BlockText, Text: compactionPrompt}}})
	req := llm.MessageRequest{
		Model:     a.w.planner.Model,
		MaxTokens: a.w.planner.MaxTokens,
		System:    llm.Content{{Type: llm.BlockText, Text: "You write faithful, compact summaries of planning conversations."}},
		Messages:  repair(msgs),
		Stream:    true,
	}
	resp, err := a.w.d.Model.Call(ctx, a.principal(), req, nil)
	summary := ""
	if err == nil {
		summary = resp.Content.Text()
	}
	if err != nil || summary == "" {
		if ctx.Err() != nil {
			return h, ctx.Err()
		}
		if span.IsRecording() {
			span.SetAttributes(attribute.String("ballet.compaction.outcome", "failed"))
		}
		a.log.WarnContext(ctx, "compaction failed; going on uncompacted", slog.Int64("estimated_tokens", est), slog.Any("error", err))
		a.w.metrics.compactions.WithLabelValues("failed").Inc()
		return h, nil
	}
	outs, err := a.w.transcript.SaveCompaction(context.WithoutCancel(ctx), a.fence, summary, upTo, a.claim.Turn.Position, est)
	if err != nil {
		return h, err
	}
	if span.IsRecording() {
		span.SetAttributes(attribute.String("ballet.compaction.outcome", "ok"), attribute.Int64("ballet.compaction.up_to", upTo))
	}
	a.publish(ctx, outs...)
	a.w.metrics.compactions.WithLabelValues("ok").Inc()
	a.log.InfoContext(ctx, "compacted", slog.Int64("up_to", upTo), slog.Int64("estimated_tokens", est))
	return a.w.transcript.LoadHistory(ctx, a.fence.Session, a.claim.Turn.Position)
}
