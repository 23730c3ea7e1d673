package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/hibiken/asynq"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tasks"
)

// Claim and lease. A turn runs only under its session's lease, taken in
// arrival order with a fresh fencing token (store.DB.ClaimTurn): every write
// the turn makes checks the token, so a worker that lost the lease cannot
// write over its successor. The lease is renewed every lease/3 while the
// turn runs, and handed back (expired at once) when a turn stops without
// ending, so that another worker resumes it without waiting.

// turnStore is what the claim, the lease and the finish of a turn write; the
// store (*store.DB) provides it. Every write but ClaimTurn checks the fence.
type turnStore interface {
	ClaimTurn(ctx context.Context, turnID, owner string, lease time.Duration) (store.Claim, error)
	RenewLease(ctx context.Context, f store.Fence, lease time.Duration) error
	HandBack(ctx context.Context, f store.Fence) error
	FinishTurn(ctx context.Context, f store.Fence, o store.TurnOutcome, last *store.Message) ([]store.Output, string, error)
	SetAttemptTrace(ctx context.Context, f store.Fence, trace map[string]string) error
}

// errLeaseLost ends a turn's context when another worker may hold its lease.
var errLeaseLost = errors.New("session lease lost")

// claim takes the session's lease for the task's turn. It returns the claim
// and true when this worker is to run the turn; otherwise what asynq should
// get: nil (ended already, or another worker runs it), errLater (an earlier
// turn of the session is still open), asynq.RevokeTask (ended here:
// cancelled before it started, or out of attempts), or an error to retry.
// Its rare log lines carry logAttrs.
func (w *Worker) claim(ctx context.Context, p tasks.TurnPayload, logAttrs []any) (store.Claim, bool, error) {
	log := func() *slog.Logger { return w.log.With(logAttrs...) }
	claim, err := w.turns.ClaimTurn(ctx, p.Turn, w.id, w.cfg.Lease)
	if err != nil {
		if store.IsCode(err, store.CodeNotFound) {
			log().WarnContext(ctx, "turn task for an unknown turn; dropped")
			return store.Claim{}, false, asynq.RevokeTask
		}
		if errors.Is(err, store.ErrSessionLocked) {
			// A stale worker's transaction holds the session; Postgres
			// ends it (database.idle_in_transaction_timeout). Meanwhile
			// this claim holds no connection.
			log().InfoContext(ctx, "session locked by another transaction; claiming again soon")
			return store.Claim{}, false, errLater
		}
		return store.Claim{}, false, err
	}
	switch claim.State {
	case store.ClaimFinished:
		return claim, false, nil
	case store.ClaimBusy:
		// Another worker runs it; if that worker dies, the sweeper resumes it.
		return claim, false, nil
	case store.ClaimWaiting:
		return claim, false, errLater
	case store.ClaimCancelled:
		w.publishFinish(turnTrace(ctx, claim), p.Session, claim.Outputs, claim.Next)
		w.metrics.turns.WithLabelValues(outcome(store.ReasonCancelled)).Inc()
		return claim, false, asynq.RevokeTask
	case store.ClaimFailed:
		log().ErrorContext(ctx, "turn ended after too many attempts", slog.Int("attempts", claim.Turn.Attempts))
		w.publishFinish(turnTrace(ctx, claim), p.Session, claim.Outputs, claim.Next)
		w.metrics.turns.WithLabelValues(outcome(store.ReasonError)).Inc()
		return claim, false, asynq.RevokeTask
	}
	// From here on, the live text of the worker this claim replaced (one
	// that lost its lease but streams still) is dropped.
	attempt := tasks.LiveAttempt(claim.Fence.Token, 0)
	if len(claim.Outputs) > 0 {
		w.d.Publisher.PublishFenced(turnTrace(ctx, claim), attempt, claim.Outputs...)
	} else if err := w.d.Publisher.FenceRound(ctx, claim.Fence.Session, claim.Fence.Turn, attempt); err != nil {
		log().WarnContext(ctx, "fence the running text", slog.Any("error", err))
	}
	if claim.Turn.Attempts == 1 && claim.Turn.StartedAt == nil {
		w.metrics.queueWait.Observe(time.Since(claim.Turn.CreatedAt).Seconds())
	} else if claim.Turn.Attempts > 1 {
		log().InfoContext(ctx, "resuming turn", slog.Int("attempt", claim.Turn.Attempts))
	}
	return claim, true, nil
}

// watch gives a turn about to be claimed its context, and registers it
// with the cancel listener until unwatch: a cancel nudge (cancel.go) ends
// wctx with errCancelled, and a lost heartbeat with errLeaseLost. It comes
// before the claim so that no nudge falls between the claim's read of the
// cancel flag and the turn's registration.
func (w *Worker) watch(ctx context.Context, turn string) (wctx context.Context, cancel context.CancelCauseFunc, unwatch func()) {
	wctx, cancel = context.WithCancelCause(ctx)
	untrack := w.running.track(turn, cancel)
	return wctx, cancel, func() {
		untrack()
		cancel(nil)
	}
}

// hold gives a claimed turn, watched in wctx with cancel, its context for as
// long as the worker holds its lease: it ends with errLeaseLost when the
// lease is lost, errCancelled on a cancel nudge, errTimedOut after the turn
// timeout. release stops the renewal and waits for one under way; the
// lease itself is released by the turn's finish, or handed back.
func (w *Worker) hold(wctx context.Context, cancel context.CancelCauseFunc, f store.Fence) (tctx context.Context, release func()) {
	tctx, stopTimer := context.WithTimeoutCause(wctx, w.cfg.TurnTimeout, errTimedOut)
	w.metrics.running.Inc()
	r := w.renewLease(tctx, f, cancel)
	return tctx, func() {
		cancel(nil) // ends a renewal under way before we wait for it
		r.stop()
		w.metrics.running.Dec()
		stopTimer()
	}
}

// leaseRenewal renews a running turn's lease every lease/3 from a timer,
// not a goroutine of its own: a turn waiting on the model holds no
// goroutine for it, and the renewal runs in the timer's goroutine. Losing
// the lease stops the turn at once.
type leaseRenewal struct {
	w       *Worker
	ctx     context.Context
	f       store.Fence
	cancel  context.CancelCauseFunc
	renewed time.Time // of the last renewal that held; read and written by fire alone

	mu      sync.Mutex
	t       *time.Timer
	stopped bool
	firing  bool
	idle    *sync.Cond // signalled when a renewal under way ends
}

func (w *Worker) renewLease(ctx context.Context, f store.Fence, cancel context.CancelCauseFunc) *leaseRenewal {
	r := &leaseRenewal{w: w, ctx: ctx, f: f, cancel: cancel, renewed: time.Now()}
	r.idle = sync.NewCond(&r.mu)
	r.mu.Lock()
	r.t = time.AfterFunc(w.cfg.Lease/3, r.fire)
	r.mu.Unlock()
	return r
}

// fire renews the lease once, and sets the timer for the next renewal
// unless the turn is over or its lease lost.
func (r *leaseRenewal) fire() {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return
	}
	r.firing = true
	r.mu.Unlock()
	again := r.renew()
	r.mu.Lock()
	r.firing = false
	if again && !r.stopped {
		r.t.Reset(r.w.cfg.Lease / 3)
	}
	r.idle.Broadcast()
	r.mu.Unlock()
}

// renew renews the lease; false when the turn is to stop.
func (r *leaseRenewal) renew() bool {
	w, ctx := r.w, r.ctx
	if ctx.Err() != nil {
		return false
	}
	err := w.turns.RenewLease(ctx, r.f, w.cfg.Lease)
	switch {
	case err == nil:
		r.renewed = time.Now()
	case errors.Is(err, store.ErrLeaseLost):
		r.cancel(errLeaseLost)
		return false
	case ctx.Err() != nil:
		return false
	default:
		w.log.WarnContext(ctx, "renew lease", slog.String("turn", r.f.Turn), slog.Any("error", err))
		// Stop before the lease can run out under us: another worker may
		// take the turn over then.
		if time.Since(r.renewed) > w.cfg.Lease-w.cfg.Lease/3 {
			r.cancel(errLeaseLost)
			return false
		}
	}
	return true
}

// stop ends the renewals and waits for one under way.
func (r *leaseRenewal) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
	r.t.Stop()
	for r.firing {
		r.idle.Wait()
	}
}

// handBack expires the lease of a turn that stops without ending, so that
// the next attempt, here or on another worker, claims it at once.
func (w *Worker) handBack(ctx context.Context, f store.Fence, log *slog.Logger) {
	if err := w.turns.HandBack(context.WithoutCancel(ctx), f); err != nil {
		log.WarnContext(ctx, "hand back lease", slog.Any("error", err))
	}
}

// leaseLost stops every running turn: this worker could not beat for so
// long that another may take its turns over.
func (w *Worker) leaseLost() {
	w.running.cancelAll(errLeaseLost)
}
