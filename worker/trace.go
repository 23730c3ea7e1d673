package worker

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/internal/tracing"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tasks"
)

// A turn's spans in the worker. Each attempt is a planner.turn span, a
// child of the send's span (the trace context stored with the turn, else
// the task's): its first attempt begins with planner.queue_wait (from
// when the turn was enqueued, or became its session's head, to the claim)
// and every attempt with planner.claim. Inside it: a chat span per model
// call (the OpenTelemetry GenAI conventions), an execute_tool span per
// tool call, planner.compact and planner.publish. An attempt that resumes
// a turn links to the attempt before it. While tracing is off no span is
// started and nothing is read or written for them.

// tracer makes the worker's spans.
var tracer = tracing.Tracer("github.com/balletplanner/ballet/worker")

// startAttempt starts the span of a claimed turn's attempt, which began at
// claimStart, with its queue wait and claim spans, and keeps its span
// context with the turn for the attempt that may resume it.
func (w *Worker) startAttempt(ctx context.Context, p tasks.TurnPayload, c store.Claim, claimStart time.Time) (context.Context, trace.Span) {
	if !tracing.On() {
		return ctx, trace.SpanFromContext(ctx)
	}
	tc := tracing.Carrier(c.Trace.Context)
	if len(tc) == 0 {
		tc = p.TraceContext()
	}
	parent := tracing.Extract(ctx, tc)
	opts := []trace.SpanStartOption{trace.WithTimestamp(claimStart)}
	if last := tracing.SpanContext(c.Trace.LastAttempt); last.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: last,
			Attributes: []attribute.KeyValue{attribute.String("ballet.link", "resumes")}}))
	}
	ctx, span := tracer.Start(parent, "planner.turn", opts...)
	if !span.IsRecording() {
		return ctx, span
	}
	span.SetAttributes(attribute.String("ballet.session", c.Fence.Session), attribute.String("ballet.turn", c.Fence.Turn),
		attribute.Int("ballet.attempt", c.Turn.Attempts), attribute.Int64("ballet.fence", c.Fence.Token),
		attribute.String("ballet.worker", w.id))
	if c.Turn.Attempts == 1 && !c.Trace.WaitingFrom.IsZero() && c.Trace.WaitingFrom.Before(claimStart) {
		// The wait comes before the attempt: a sibling of it, under the send.
		_, wait := tracer.Start(parent, "planner.queue_wait", trace.WithTimestamp(c.Trace.WaitingFrom))
		wait.End(trace.WithTimestamp(claimStart))
	}
	_, claim := tracer.Start(ctx, "planner.claim", trace.WithTimestamp(claimStart))
	claim.End()
	if err := w.turns.SetAttemptTrace(ctx, c.Fence, tracing.Inject(ctx)); err != nil {
		w.log.WarnContext(ctx, "keep the attempt's trace context", slog.String("turn", c.Fence.Turn), slog.Any("error", err))
	}
	return ctx, span
}

// turnTrace is ctx in the trace of a claimed turn (the send's trace
// context stored with it), for what the claim publishes outside an
// attempt: its started output, or the done of a turn the claim ended; ctx
// as it is while tracing is off.
func turnTrace(ctx context.Context, c store.Claim) context.Context {
	if !tracing.On() || len(c.Trace.Context) == 0 {
		return ctx
	}
	return tracing.Extract(ctx, tracing.Carrier(c.Trace.Context))
}

// endAttempt ends an attempt's span with how it ended: its outcome, or
// err when it stopped without one (handed back, cut off, lease lost).
func endAttempt(span trace.Span, a *attempt, err error) {
	if errors.Is(err, asynq.RevokeTask) {
		err = nil // a cancelled turn's end, not a failure
	}
	if span.IsRecording() && a != nil {
		span.SetAttributes(attribute.String("ballet.done_reason", a.outcome.Reason), attribute.Int("ballet.rounds", a.rounds))
	}
	tracing.EndSpan(span, err)
}

// providerAnthropic is what the worker's model calls speak: the
// Anthropic Messages API, through the gateway.
const providerAnthropic = "anthropic"

// startChat starts the span of one model call (gen_ai.operation.name chat).
func startChat(ctx context.Context, req llm.MessageRequest) (context.Context, trace.Span) {
	if !tracing.On() {
		return ctx, trace.SpanFromContext(ctx)
	}
	ctx, span := tracer.Start(ctx, "chat "+req.Model, trace.WithSpanKind(trace.SpanKindClient))
	if span.IsRecording() {
		span.SetAttributes(semconv.GenAIOperationNameChat, semconv.GenAIProviderNameAnthropic,
			attribute.String("gen_ai.system", providerAnthropic), semconv.GenAIRequestModel(req.Model),
			semconv.GenAIRequestMaxTokens(req.MaxTokens))
	}
	return ctx, span
}

// endChat ends a model call's span with its usage and stop reason.
func endChat(span trace.Span, resp *llm.MessageResponse, err error) {
	if span.IsRecording() && resp != nil {
		span.SetAttributes(semconv.GenAIResponseModel(resp.Model), semconv.GenAIResponseID(resp.ID),
			semconv.GenAIUsageInputTokensKey.Int64(resp.Usage.InputTokens), semconv.GenAIUsageOutputTokensKey.Int64(resp.Usage.OutputTokens),
			attribute.Int64("gen_ai.usage.cache_read.input_tokens", resp.Usage.CacheReadInputTokens),
			attribute.Int64("gen_ai.usage.cache_creation.input_tokens", resp.Usage.CacheCreationInputTokens))
		if resp.StopReason != "" {
			span.SetAttributes(semconv.GenAIResponseFinishReasons(resp.StopReason))
		}
	}
	if err != nil && span.IsRecording() {
		span.SetAttributes(semconv.ErrorTypeKey.String(errorType(err)))
	}
	tracing.EndSpan(span, err)
}

// errorType names a model call's failure for error.type: the gateway's
// error type, or _OTHER.
func errorType(err error) string {
	var api *llm.APIError
	if errors.As(err, &api) && api.Type != "" {
		return api.Type
	}
	return semconv.ErrorTypeOther.Value.AsString()
}

// startTool starts the span of one tool call (gen_ai.operation.name
// execute_tool).
func startTool(ctx context.Context, c store.Block) (context.Context, trace.Span) {
	if !tracing.On() {
		return ctx, trace.SpanFromContext(ctx)
	}
	ctx, span := tracer.Start(ctx, "execute_tool "+c.Name)
	if span.IsRecording() {
		span.SetAttributes(semconv.GenAIOperationNameExecuteTool, semconv.GenAIToolName(c.Name),
			semconv.GenAIToolCallID(c.ToolUseID), semconv.GenAIToolType("function"))
	}
	return ctx, span
}

// endTool ends a tool call's span: its outcome is ok, error (the tool
// answered an error the model sees) or stored (run by an earlier attempt);
// err is a failure of the call itself.
func endTool(span trace.Span, tc store.ToolCall, ran bool, err error) {
	if span.IsRecording() {
		outcome := "ok"
		switch {
		case !ran:
			outcome = "stored"
		case tc.IsError:
			outcome = "error"
			span.SetAttributes(semconv.ErrorTypeKey.String("tool_error"))
		}
		span.SetAttributes(attribute.String("ballet.tool.outcome", outcome))
	}
	tracing.EndSpan(span, err)
}

// startPublish starts the span of a publish of stored outputs.
func startPublish(ctx context.Context, outs []store.Output) (context.Context, trace.Span) {
	ctx, span := tracing.StartSpan(ctx, tracer, "planner.publish", trace.SpanKindProducer)
	if span.IsRecording() {
		types := make([]string, len(outs))
		for i, o := range outs {
			types[i] = o.Type
		}
		span.SetAttributes(attribute.StringSlice("ballet.output.types", types))
	}
	return ctx, span
}
