package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/balletplanner/ballet/internal/startstop"
	"github.com/balletplanner/ballet/store"
)

// Cancel, end to end. POST /api/v1/planner/sessions/{id}/cancel (and the
// realtime planner.cancel) reach tasks.Planner.Cancel, which commits
// store.DB.CancelTurns: a queued turn ends there at once with done
// "cancelled"; a running one gets the durable cancel_requested flag, and
// its turn id is published on the cancel channel. This file is the worker's
// side: the listener cancels the running turn's context with errCancelled
// at once, and the turn checks the durable flag between steps in case the
// nudge was lost. Either way the turn ends with outcomeCancelled. A turn is
// watched from before its claim (Worker.watch): the claim reads the flag,
// and a nudge for a cancel committed after that read must find the turn,
// or a turn in a long model call would not stop until the call ended.

// cancelStore is what a turn reads of its durable cancel flag; the store
// (*store.DB) provides it.
type cancelStore interface {
	CancelRequested(ctx context.Context, turnID string) (bool, error)
}

// errCancelled ends a turn's context when its cancel was asked for.
var errCancelled = errors.New("turn cancelled")

// outcomeCancelled ends a turn whose cancel was asked for.
var outcomeCancelled = store.TurnOutcome{Status: store.TurnCancelled, Reason: store.ReasonCancelled}

// cancelListener cancels the running turns named on the cancel channel, in
// the background from Start to Stop.
type cancelListener struct {
	rdb     redis.UniversalClient
	channel string
	running *runningTurns

	startstop.Base
}

func newCancelListener(rdb redis.UniversalClient, channel string, running *runningTurns) *cancelListener {
	return &cancelListener{rdb: rdb, channel: channel, running: running}
}

// Start subscribes to the cancel channel, and returns once the subscription
// is confirmed: no nudge published after Start returns is missed. Stop
// closes the subscription and waits for the listener to return.
func (l *cancelListener) Start(ctx context.Context) error {
	run, ok := l.StartInit(ctx)
	if !ok {
		return nil
	}
	// The subscription is the run's: it outlives a start whose ctx ends.
	sub := l.rdb.Subscribe(run, l.channel)
	if _, err := sub.Receive(run); err != nil {
		_ = sub.Close()
		l.StartFailed()
		return fmt.Errorf("worker: subscribe to cancels: %w", err)
	}
	l.Go(func(ctx context.Context) {
		<-ctx.Done()
		_ = sub.Close()
	})
	l.Go(func(context.Context) {
		for msg := range sub.Channel() {
			l.running.cancel(msg.Payload, errCancelled)
		}
	})
	return nil
}

// runningTurns are the turns this worker runs or is claiming, and how to
// stop each. One turn can have two entries for a moment: a task of a turn
// that runs here, delivered again, is watched while its claim finds the
// turn busy; a cancel stops both.
type runningTurns struct {
	mu    sync.Mutex
	turns map[string][]*runningTurn
}

// runningTurn is a turn this worker runs, and how to stop it.
type runningTurn struct{ cancel context.CancelCauseFunc }

func newRunningTurns() *runningTurns {
	return &runningTurns{turns: map[string][]*runningTurn{}}
}

// track registers a turn, claimed or about to be, until the returned func
// is called.
func (r *runningTurns) track(turn string, cancel context.CancelCauseFunc) func() {
	rt := &runningTurn{cancel: cancel}
	r.mu.Lock()
	r.turns[turn] = append(r.turns[turn], rt)
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		rts := slices.DeleteFunc(r.turns[turn], func(x *runningTurn) bool { return x == rt })
		if len(rts) == 0 {
			delete(r.turns, turn)
		} else {
			r.turns[turn] = rts
		}
	}
}

// cancel stops the turn, if this worker runs it.
func (r *runningTurns) cancel(turn string, cause error) {
	r.mu.Lock()
	rts := slices.Clone(r.turns[turn])
	r.mu.Unlock()
	for _, rt := range rts {
		rt.cancel(cause)
	}
}

// cancelAll stops every running turn.
func (r *runningTurns) cancelAll(cause error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rts := range r.turns {
		for _, rt := range rts {
			rt.cancel(cause)
		}
	}
}

// cancelled reports whether the turn was cancelled: the nudge cancels ctx,
// and the durable flag is checked between steps in case a nudge was lost.
func (a *attempt) cancelled(ctx context.Context) bool {
	if errors.Is(context.Cause(ctx), errCancelled) {
		return true
	}
	yes, err := a.w.flags.CancelRequested(ctx, a.fence.Turn)
	return err == nil && yes
}

// cancelledWhileCutOff reports whether a turn that asynq cut off was in fact
// cancelled: asynq cannot tell the dashboard's cancel button from a lost
// asynq lease, so only the durable flag makes it a cancel, and never while
// the worker stops (then the turn is handed back and resumes).
func (w *Worker) cancelledWhileCutOff(ctx context.Context, turn string) bool {
	yes, err := w.flags.CancelRequested(context.WithoutCancel(ctx), turn)
	return err == nil && yes && !w.stopping.Load()
}
