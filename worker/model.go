package worker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/sethvargo/go-retry"

	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tasks"
)

// GatewayModel makes the planner's model calls through the gateway client,
// streamed; cancelling ctx closes the call at once.
type GatewayModel struct {
	Client *llm.Client
}

// Call streams one answer, calling onText (when not nil) for each text piece.
// Each call is a chat span; the client carries its trace context to the
// gateway.
func (g GatewayModel) Call(ctx context.Context, who llm.Principal, req llm.MessageRequest, onText func(string)) (resp *llm.MessageResponse, err error) {
	ctx, span := startChat(ctx, req)
	defer func() { endChat(span, resp, err) }()
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
	resp, err := a.callWithRetries(ctx, req, func(try int) func(string) {
		live := &liveText{pub: a.w.d.Publisher, log: a.log, session: a.fence.Session, turn: a.fence.Turn,
			attempt: tasks.LiveAttempt(a.fence.Token, try)}
		return func(delta string) { live.add(ctx, delta) }
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
	a.publish(ctx, outs...)
	return nil
}

// callWithRetries makes one model call, and makes it again, up to
// worker.model_retries times with growing waits, when it never reached an
// answer: a gateway that restarts or is replaced costs a turn some seconds
// rather than an attempt, and the turn stays here, where a cancel or a lost
// lease (ctx) stops the waits at once. onText gives each try (0 the first)
// the function that takes its text.
func (a *attempt) callWithRetries(ctx context.Context, req llm.MessageRequest, onText func(try int) func(string)) (*llm.MessageResponse, error) {
	cfg := a.w.cfg
	waits := retry.WithJitterPercent(10, retry.WithCappedDuration(maxModelRetryWait, retry.NewExponential(cfg.ModelRetryWait)))
	var unavailableSince time.Time
	var after time.Duration // the next wait, when the gateway named it
	backoff := retry.BackoffFunc(func() (time.Duration, bool) {
		if after > 0 {
			d := after
			after = 0
			return d, false
		}
		return waits.Next()
	})
	try, retries := 0, 0
	return retry.DoValue(ctx, backoff, func(ctx context.Context) (*llm.MessageResponse, error) {
		resp, err := a.w.d.Model.Call(ctx, a.principal(), req, onText(try))
		try++
		if err == nil || ctx.Err() != nil {
			return resp, err
		}
		if wait, ok := unavailable(err); ok && try < tasks.AttemptsPerLease {
			if unavailableSince.IsZero() {
				unavailableSince = time.Now()
			}
			if time.Since(unavailableSince)+wait <= cfg.ModelUnavailableFor {
				a.log.WarnContext(ctx, "the gateway is unavailable; calling again", slog.Duration("after", wait),
					slog.Duration("waiting_for", time.Since(unavailableSince).Round(time.Second)), slog.Any("error", err))
				a.w.metrics.modelRetries.Inc()
				after = wait
				return nil, retry.RetryableError(err)
			}
			return nil, err // waited long enough: the attempt fails
		}
		if !unanswered(err) {
			return resp, err
		}
		if retries++; retries > cfg.ModelRetries || try >= tasks.AttemptsPerLease {
			return nil, err // the last: the attempt fails
		}
		a.log.WarnContext(ctx, "model call got no answer; calling again", slog.Int("try", retries),
			slog.Int("retries", cfg.ModelRetries), slog.Any("error", err))
		a.w.metrics.modelRetries.Inc()
		return nil, retry.RetryableError(err)
	})
}

// unavailable reports whether the gateway answered that it cannot serve
// now but will (503: its database or the upstream is unavailable; 529:
// the upstream is overloaded), and how long to wait: its Retry-After,
// within 1s-30s (5s when it named none).
func unavailable(err error) (time.Duration, bool) {
	var api *llm.APIError
	if !errors.As(err, &api) || (api.Status != http.StatusServiceUnavailable && api.Status != 529) {
		return 0, false
	}
	wait := 5 * time.Second
	if api.RetryAfter > 0 {
		wait = time.Duration(api.RetryAfter) * time.Second
	}
	return min(max(wait, time.Second), maxModelRetryWait), true
}

// unanswered reports whether a model call failed before the gateway's
// answer ended: the request never got an answer (refused, reset, closed:
// what http.Client.Do reports as a *url.Error), or the stream was cut. An
// error the gateway answered with (*llm.APIError) is not one of them.
func unanswered(err error) bool {
	var api *llm.APIError
	if errors.As(err, &api) {
		return false
	}
	var ue *url.Error
	var op *net.OpError
	return errors.As(err, &ue) || errors.As(err, &op) || errors.Is(err, io.ErrUnexpectedEOF)
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
