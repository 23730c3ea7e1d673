package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/store"
)

// attempt is one attempt at a turn. Every step is driven by what is stored,
// so an attempt that follows a crash resumes where the dead one stopped.
type attempt struct {
	w       *Worker
	claim   store.Claim
	fence   store.Fence
	log     *slog.Logger
	started time.Time
	rounds  int

	system        string
	project       store.Project
	human         *store.Caller
	compactedOnce bool
	// final is the model's last answer (no tool calls): it is stored with
	// the turn's done, in one transaction.
	final *store.Message
	// outcome is how the turn ends, once the loop has ended it.
	outcome store.TurnOutcome
}

// transcriptStore is what a turn reads and writes of its session's messages
// (loop.go, model.go, toolcalls.go, compact.go); the store (*store.DB)
// provides it. Every write checks the fence.
type transcriptStore interface {
	LoadHistory(ctx context.Context, sessionID string, position int64) (store.History, error)
	AppendAnswer(ctx context.Context, f store.Fence, m store.Message, refused []store.ToolCall, extra ...store.Output) (store.Message, []store.Output, error)
	AppendMessage(ctx context.Context, f store.Fence, m store.Message, extra ...store.Output) (store.Message, []store.Output, error)
	SaveCompaction(ctx context.Context, f store.Fence, summary string, upTo, beforeTurn, estimatedTokens int64) ([]store.Output, error)
}

// principalStore is what a turn reads of the human it acts for; the store
// (*store.DB) provides it.
type principalStore interface {
	Principal(ctx context.Context, subject string) (*store.Principal, error)
}

// loop runs rounds until the turn ends, and returns how it ends; an error
// is an internal failure that asynq should retry.
func (a *attempt) loop(ctx context.Context) (store.TurnOutcome, error) {
	if err := a.prepare(ctx); err != nil {
		return a.fail(ctx, err)
	}
	for {
		if errors.Is(context.Cause(ctx), errCancelled) {
			return outcomeCancelled, nil
		}
		h, err := a.history(ctx)
		if err != nil {
			return a.fail(ctx, err)
		}
		if h.CancelRequested(a.fence.Turn) {
			return outcomeCancelled, nil
		}
		mine := turnMessages(h.Messages, a.fence.Turn)
		a.rounds = countRole(mine, "assistant")
		last := mine[len(mine)-1]
		if last.Role == "assistant" {
			calls := toolUses(last)
			if len(calls) == 0 {
				return done(last.StopReason), nil
			}
			if n := countToolRounds(mine); n >= a.w.planner.MaxRounds {
				return store.TurnOutcome{Status: store.TurnDone, Reason: store.ReasonMaxRounds, Err: fmt.Sprintf(
					"The turn stopped after %d tool rounds (planner.max_rounds); its last tool calls were not run. Send a new message to continue.", n)}, nil
			}
			if err := a.runTools(ctx, calls); err != nil {
				return a.fail(ctx, err)
			}
			continue
		}
		if a.shouldCompact(h) {
			h, err = a.compact(ctx, h)
			if err != nil {
				return a.fail(ctx, err)
			}
		}
		if err := a.callModel(ctx, h); err != nil {
			return a.fail(ctx, err)
		}
		if a.final != nil {
			a.rounds++
			return done(a.final.StopReason), nil
		}
	}
}

// history is what the turn sees now: the claim's read for the first
// round, a fresh read after that.
func (a *attempt) history(ctx context.Context) (store.History, error) {
	if h := a.claim.History; h != nil {
		a.claim.History = nil
		return *h, nil
	}
	return a.w.transcript.LoadHistory(ctx, a.fence.Session, a.claim.Turn.Position)
}

// done is the outcome of a turn the model ended with stopReason.
func done(stopReason string) store.TurnOutcome {
	if stopReason == "" {
		stopReason = store.ReasonEndTurn
	}
	return store.TurnOutcome{Status: store.TurnDone, Reason: stopReason}
}

// fail turns an error into the turn's end. Cancellation and a lost lease win
// over whatever error they caused; a model or gateway refusal ends the turn
// with an error output; anything else is returned, for asynq to retry.
func (a *attempt) fail(ctx context.Context, err error) (store.TurnOutcome, error) {
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, errCancelled) || (ctx.Err() == nil && a.cancelled(ctx)):
		return outcomeCancelled, nil
	case errors.Is(cause, errTimedOut):
		return store.TurnOutcome{Status: store.TurnFailed, Reason: store.ReasonError,
			Err: fmt.Sprintf("The turn took longer than %s and was stopped.", a.w.cfg.TurnTimeout)}, nil
	case ctx.Err() != nil:
		return store.TurnOutcome{}, err // the handler decides: shutdown, lease lost
	}
	var api *llm.APIError
	if errors.As(err, &api) {
		a.log.WarnContext(ctx, "model call refused", slog.Int("status", api.Status), slog.String("type", api.Type),
			slog.String("message", api.Message))
		return store.TurnOutcome{Status: store.TurnFailed, Reason: store.ReasonError,
			Err: "The model call failed: " + api.Message}, nil
	}
	if errors.Is(err, store.ErrLeaseLost) {
		return store.TurnOutcome{}, err
	}
	a.log.ErrorContext(ctx, "turn failed", slog.Any("error", err))
	return store.TurnOutcome{}, err
}

// caller is the human the planner acts for, with the planner as actor; it
// is read once per attempt.
func (a *attempt) caller(ctx context.Context) (store.Caller, error) {
	if a.human != nil {
		return *a.human, nil
	}
	p, err := a.w.principals.Principal(ctx, a.claim.Turn.Author)
	if err != nil {
		return store.Caller{}, err
	}
	a.human = &store.Caller{Principal: p, Actor: store.PlannerActor(a.fence.Session, a.claim.Turn.Author)}
	return *a.human, nil
}

// principal is who the gateway meters a turn's model calls to.
func (a *attempt) principal() llm.Principal {
	s := a.claim.Session
	return llm.Principal{Subject: "planner:" + s.ID, Organization: s.OrganizationID, Project: s.ProjectID,
		Session: s.ID, ActingFor: a.claim.Turn.Author}
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
