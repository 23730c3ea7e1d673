package worker

import (
	"context"
	"errors"
	"testing"
)

// Two watches of one turn (a task delivered again while the turn runs
// here): the second one's end leaves the first watched, and a cancel
// reaches every watch of the turn, no other.
func TestRunningTurnsKeepEveryWatchOfATurn(t *testing.T) {
	t.Parallel()
	r := newRunningTurns()
	running, cancelRunning := context.WithCancelCause(context.Background())
	claiming, cancelClaiming := context.WithCancelCause(context.Background())
	other, cancelOther := context.WithCancelCause(context.Background())
	r.track("t1", cancelRunning)
	r.track("t2", cancelOther)
	r.track("t1", cancelClaiming)()
	r.cancel("t1", errCancelled)
	if !errors.Is(context.Cause(running), errCancelled) {
		t.Errorf("the running watch of t1: cause %v, want errCancelled", context.Cause(running))
	}
	if claiming.Err() != nil || other.Err() != nil {
		t.Errorf("an ended watch or another turn was cancelled: %v, %v", claiming.Err(), other.Err())
	}
	untrack := r.track("t1", cancelClaiming)
	untrack()
	untrack() // twice is harmless
	if n := len(r.turns["t1"]); n != 1 {
		t.Errorf("t1 has %d watches, want 1", n)
	}
}
