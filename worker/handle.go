package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"
	"go.opentelemetry.io/otel/trace"

	"github.com/balletplanner/ballet/internal/requestid"
	"github.com/balletplanner/ballet/internal/tracing"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tasks"
)

// errTimedOut ends a turn's context after the turn timeout.
var errTimedOut = errors.New("turn timed out")

// handle runs one turn task: claim the session's lease (claim.go), run or
// resume the turn from what is stored (loop.go), end it with exactly one
// done.
func (w *Worker) handle(ctx context.Context, task *asynq.Task) (err error) {
	p, err := tasks.ParseTurnPayload(task.Payload())
	if err != nil {
		w.log.ErrorContext(ctx, "bad turn task payload", slog.Any("error", err))
		return fmt.Errorf("worker: payload: %v: %w", err, asynq.SkipRetry)
	}
	// The turn's log attributes, given to a logger once (With formats them
	// at once, level or not): after the claim, when the fence is known.
	attrs := make([]any, 0, 4)
	attrs = append(attrs, slog.String("session", p.Session), slog.String("turn", p.Turn))
	if p.RequestID != "" {
		// The gateway calls of the turn carry it too (llm.Client).
		ctx = requestid.With(ctx, p.RequestID)
		attrs = append(attrs, slog.String("request_id", p.RequestID))
	}
	// Watched for cancel nudges before the claim: a cancel committed after
	// the claim read the turn's cancel flag still finds it (cancel.go).
	wctx, cancel, unwatch := w.watch(ctx, p.Turn)
	defer unwatch()
	claimStart := time.Now()
	claim, ok, err := w.claim(ctx, p, attrs)
	if !ok {
		return err
	}
	// The attempt's span (trace.go), in the contexts of everything it runs.
	ctx, span := w.startAttempt(ctx, p, claim, claimStart)
	var a *attempt
	defer func() { endAttempt(span, a, err) }()
	if tracing.On() {
		wctx = trace.ContextWithSpan(wctx, span)
	}
	hooksFor(p.Session).afterClaim(wctx, p.Turn)
	log := w.log.With(append(attrs, slog.Int64("fence", claim.Fence.Token))...)
	tctx, release := w.hold(wctx, cancel, claim.Fence)
	defer release()
	a, err = w.run(ctx, tctx, claim, log)
	if a == nil {
		return err
	}
	if err = w.finish(ctx, a); err != nil {
		return err
	}
	w.keepOutcome(ctx, task, a.outcome, log)
	return nil
}

// turnResult is a completed turn task's result: how the turn ended.
type turnResult struct {
	Status store.TurnStatus `json:"status"`
	Reason string           `json:"reason"`
}

// keepOutcome writes how the turn ended as its task's result, which the
// dashboard's Completed tab shows while asynq keeps the task
// (worker.completed_retention); a task that is not kept gets none.
func (w *Worker) keepOutcome(ctx context.Context, task *asynq.Task, o store.TurnOutcome, log *slog.Logger) {
	rw := task.ResultWriter()
	if rw == nil || w.d.Queue.KeptCompleted() <= 0 {
		return
	}
	b, err := json.Marshal(turnResult{Status: o.Status, Reason: o.Reason})
	if err == nil {
		_, err = rw.Write(b)
	}
	if err != nil {
		log.WarnContext(ctx, "write the turn task's result", slog.Any("error", err))
	}
}

// run runs a claimed turn in tctx, the context hold gave it, until it ends.
// It returns the ended attempt, for finish to store its outcome; or nil and
// what asynq should get when the turn is not this attempt's to end: another
// worker took the lease over, asynq cut the attempt off (drain.go), or an
// internal failure asks asynq to retry.
func (w *Worker) run(ctx, tctx context.Context, claim store.Claim, log *slog.Logger) (*attempt, error) {
	a := &attempt{w: w, claim: claim, fence: claim.Fence, log: log, started: time.Now()}
	o, err := a.loop(tctx)
	cause := context.Cause(tctx)
	switch {
	case errors.Is(cause, errLeaseLost):
		log.WarnContext(ctx, "lease lost; another worker took the turn over")
		return nil, nil
	case ctx.Err() != nil && !errors.Is(cause, errCancelled):
		if !w.cancelledWhileCutOff(ctx, claim.Fence.Turn) {
			return nil, w.cutOff(ctx, claim.Fence, log)
		}
		o = outcomeCancelled
	case err != nil:
		// An internal failure (e.g. Postgres unreachable): let asynq retry,
		// and let the next attempt claim the lease at once.
		w.handBack(ctx, claim.Fence, log)
		return nil, fmt.Errorf("worker: turn %s: %w", claim.Fence.Turn, err)
	}
	a.outcome = o
	return a, nil
}

// finish stores the attempt's outcome, with the model's final answer when
// the turn is done, publishes the last outputs and enqueues the session's
// next turn.
func (w *Worker) finish(ctx context.Context, a *attempt) error {
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer fcancel()
	var final *store.Message
	if a.outcome.Status == store.TurnDone {
		final = a.final
	}
	outs, next, err := w.turns.FinishTurn(fctx, a.fence, a.outcome, final)
	if errors.Is(err, store.ErrLeaseLost) {
		a.log.WarnContext(ctx, "lease lost before the turn could end; another worker ends it")
		return nil
	}
	if err != nil {
		_ = w.turns.HandBack(fctx, a.fence)
		return err
	}
	reason := a.outcome.Reason
	w.publishFinish(fctx, a.fence.Session, outs, next)
	w.metrics.turns.WithLabelValues(outcome(reason)).Inc()
	w.metrics.duration.Observe(time.Since(a.started).Seconds())
	w.metrics.rounds.Observe(float64(a.rounds))
	a.log.InfoContext(ctx, "turn ended", slog.String("reason", reason), slog.Int("rounds", a.rounds),
		slog.Duration("took", time.Since(a.started)))
	if reason == store.ReasonCancelled {
		return asynq.RevokeTask
	}
	return nil
}

// publishFinish publishes a turn's last outputs and enqueues the session's
// next turn.
func (w *Worker) publishFinish(ctx context.Context, session string, outs []store.Output, next string) {
	pctx, span := startPublish(ctx, outs)
	w.d.Publisher.Publish(pctx, outs...)
	span.End()
	if next != "" {
		w.planners.Enqueue(ctx, session, next)
	}
}

// RunTurn runs one turn in the calling goroutine, exactly as a task would,
// without the queue; benchmarks use it to measure what the queue adds.
func (w *Worker) RunTurn(ctx context.Context, session, turn string) error {
	payload, err := tasks.TurnPayload{Session: session, Turn: turn}.Marshal()
	if err != nil {
		return err
	}
	err = w.handle(ctx, asynq.NewTask(tasks.TypeTurn, payload))
	if errors.Is(err, asynq.RevokeTask) {
		return nil
	}
	return err
}
