package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"

	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tasks"
)

// Why a turn's context ends, beside asynq's own reasons.
var (
	errCancelled = errors.New("turn cancelled")
	errLeaseLost = errors.New("session lease lost")
	errTimedOut  = errors.New("turn timed out")
)

// handle runs one turn task: claim the session's lease, run or resume the
// turn from what is stored, end it with exactly one done.
func (w *Worker) handle(ctx context.Context, task *asynq.Task) error {
	var p tasks.TurnPayload
	if err := json.Unmarshal(task.Payload(), &p); err != nil {
		w.log.ErrorContext(ctx, "bad turn task payload", slog.Any("error", err))
		return fmt.Errorf("worker: payload: %v: %w", err, asynq.SkipRetry)
	}
	log := w.log.With(slog.String("session", p.Session), slog.String("turn", p.Turn))
	claim, err := w.d.DB.ClaimTurn(ctx, p.Turn, w.id, w.cfg.Lease)
	if err != nil {
		if store.IsCode(err, store.CodeNotFound) {
			log.WarnContext(ctx, "turn task for an unknown turn; dropped")
			return asynq.RevokeTask
		}
		return err
	}
	switch claim.State {
	case store.ClaimFinished:
		return nil
	case store.ClaimBusy:
		// Another worker runs it; if that worker dies, the sweeper resumes it.
		return nil
	case store.ClaimWaiting:
		return errLater
	case store.ClaimCancelled:
		w.publishFinish(ctx, p.Session, claim.Outputs, claim.Next)
		w.metrics.turns.WithLabelValues(outcome(store.ReasonCancelled)).Inc()
		return asynq.RevokeTask
	case store.ClaimFailed:
		log.ErrorContext(ctx, "turn ended after too many attempts", slog.Int("attempts", claim.Turn.Attempts))
		w.publishFinish(ctx, p.Session, claim.Outputs, claim.Next)
		w.metrics.turns.WithLabelValues(outcome(store.ReasonError)).Inc()
		return asynq.RevokeTask
	}
	log = log.With(slog.Int64("fence", claim.Fence.Token))
	w.d.Publisher.Publish(ctx, claim.Outputs...)
	if claim.Turn.Attempts == 1 && claim.Turn.StartedAt == nil {
		w.metrics.queueWait.Observe(time.Since(claim.Turn.CreatedAt).Seconds())
	} else if claim.Turn.Attempts > 1 {
		log.InfoContext(ctx, "resuming turn", slog.Int("attempt", claim.Turn.Attempts))
	}

	tctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	tctx, stopTimer := context.WithTimeoutCause(tctx, w.cfg.TurnTimeout, errTimedOut)
	defer stopTimer()
	defer w.track(p.Turn, cancel)()
	renewDone := make(chan struct{})
	go w.renew(tctx, claim.Fence, cancel, renewDone)
	defer func() { <-renewDone }()
	defer cancel(nil) // stops the renewer before we wait for it

	started := time.Now()
	r := &run{w: w, claim: claim, fence: claim.Fence, log: log}
	status, reason, errText := r.loop(tctx)
	cause := context.Cause(tctx)
	switch {
	case errors.Is(cause, errLeaseLost):
		log.WarnContext(ctx, "lease lost; another worker took the turn over")
		return nil
	case ctx.Err() != nil && !errors.Is(cause, errCancelled):
		// asynq cancelled us: shutdown (the task is already back in the
		// queue), a lost asynq lease (Redis unreachable), or the dashboard's
		// cancel button, which asynq cannot tell apart. Only our durable flag
		// makes it a cancel; otherwise the turn is handed back and resumes.
		bg := context.WithoutCancel(ctx)
		if yes, err := w.d.DB.CancelRequested(bg, p.Turn); err == nil && yes && !w.stopping.Load() {
			status, reason, errText = store.TurnCancelled, store.ReasonCancelled, ""
			break
		}
		if err := w.d.DB.HandBack(bg, claim.Fence); err != nil {
			log.WarnContext(ctx, "hand back lease", slog.Any("error", err))
		}
		log.InfoContext(ctx, "turn handed back", slog.Bool("shutdown", w.stopping.Load()))
		return ctx.Err()
	case status == "":
		// An internal failure (e.g. Postgres unreachable): let asynq retry,
		// and let the next attempt claim the lease at once.
		if err := w.d.DB.HandBack(context.WithoutCancel(ctx), claim.Fence); err != nil {
			log.WarnContext(ctx, "hand back lease", slog.Any("error", err))
		}
		return fmt.Errorf("worker: turn %s: %s", p.Turn, errText)
	}
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer fcancel()
	var final *store.Message
	if status == store.TurnDone {
		final = r.final
	}
	outs, next, err := w.d.DB.FinishTurn(fctx, claim.Fence, status, reason, errText, final)
	if errors.Is(err, store.ErrLeaseLost) {
		log.WarnContext(ctx, "lease lost before the turn could end; another worker ends it")
		return nil
	}
	if err != nil {
		_ = w.d.DB.HandBack(fctx, claim.Fence)
		return err
	}
	w.publishFinish(fctx, p.Session, outs, next)
	w.metrics.turns.WithLabelValues(outcome(reason)).Inc()
	w.metrics.duration.Observe(time.Since(started).Seconds())
	w.metrics.rounds.Observe(float64(r.rounds))
	log.InfoContext(ctx, "turn ended", slog.String("reason", reason), slog.Int("rounds", r.rounds),
		slog.Duration("took", time.Since(started)))
	if reason == store.ReasonCancelled {
		return asynq.RevokeTask
	}
	return nil
}

// publishFinish publishes a turn's last outputs and enqueues the session's
// next turn.
func (w *Worker) publishFinish(ctx context.Context, session string, outs []store.Output, next string) {
	w.d.Publisher.Publish(ctx, outs...)
	if next != "" {
		w.planners.Enqueue(ctx, session, next)
	}
}

// renew keeps the lease alive; losing it stops the turn at once.
func (w *Worker) renew(ctx context.Context, f store.Fence, cancel context.CancelCauseFunc, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(w.cfg.Lease / 3)
	defer t.Stop()
	renewed := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			err := w.d.DB.RenewLease(ctx, f, w.cfg.Lease)
			switch {
			case err == nil:
				renewed = time.Now()
			case errors.Is(err, store.ErrLeaseLost):
				cancel(errLeaseLost)
				return
			case ctx.Err() == nil:
				w.log.WarnContext(ctx, "renew lease", slog.String("turn", f.Turn), slog.Any("error", err))
				// Stop before the lease can run out under us: another worker
				// may take the turn over then.
				if time.Since(renewed) > w.cfg.Lease-w.cfg.Lease/3 {
					cancel(errLeaseLost)
					return
				}
			}
		}
	}
}

// outcome is the metrics label of a done reason.
func outcome(reason string) string {
	switch reason {
	case store.ReasonCancelled, store.ReasonMaxRounds, store.ReasonError:
		return reason
	}
	return "completed"
}

// principal is who the gateway meters a turn's model calls to.
func (r *run) principal() llm.Principal {
	s := r.claim.Session
	return llm.Principal{Subject: "planner:" + s.ID, Organization: s.OrganizationID, Project: s.ProjectID,
		Session: s.ID, ActingFor: r.claim.Turn.Author}
}

// RunTurn runs one turn in the calling goroutine, exactly as a task would,
// without the queue; benchmarks use it to measure what the queue adds.
func (w *Worker) RunTurn(ctx context.Context, session, turn string) error {
	payload, _ := json.Marshal(tasks.TurnPayload{Session: session, Turn: turn})
	err := w.handle(ctx, asynq.NewTask(tasks.TypeTurn, payload))
	if errors.Is(err, asynq.RevokeTask) {
		return nil
	}
	return err
}
