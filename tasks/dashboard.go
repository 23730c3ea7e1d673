package tasks

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/hibiken/asynq"

	"github.com/balletplanner/ballet/store"
)

// TaskCancel is what CancelTask did to a task's turn.
type TaskCancel struct {
	// Turn is the turn the task runs.
	Turn string
	// Cancelled: the turn was queued and has ended with done "cancelled".
	Cancelled bool
	// Stopping: the turn was running; its worker stops it and ends it with
	// done "cancelled".
	Stopping bool
}

// Ended reports whether the turn had ended before: nothing was cancelled.
func (c TaskCancel) Ended() bool { return !c.Cancelled && !c.Stopping }

// CancelTask cancels the turn a planner-queue task runs, for the queue
// dashboard: the task's payload names the turn (whatever the task's id: the
// turn's, a resume's `<turn>:resume:<n>` or a retry's `<turn>:<n>`), which
// Cancel cancels with the caller's permission (tracker.write on its
// project), exactly as planner.cancel does. A task no worker holds is then
// deleted from the queue; an active one ends when its worker stops the turn.
// A task that is not in the queue is not_found; one that runs no turn is
// invalid_argument.
func (p *Planner) CancelTask(ctx context.Context, caller store.Caller, taskID string) (TaskCancel, error) {
	queue := p.queue.names.Queue()
	info, err := p.queue.inspector.GetTaskInfo(queue, taskID)
	switch {
	case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound):
		return TaskCancel{}, store.Errorf(store.CodeNotFound, "task %q is not in queue %s: it has ended or was removed", taskID, queue)
	case err != nil:
		return TaskCancel{}, fmt.Errorf("tasks: look up task %s: %w", taskID, err)
	case info.Type != TypeTurn:
		return TaskCancel{}, store.Errorf(store.CodeInvalid, "task %q is a %s task, not a planner turn", taskID, info.Type)
	}
	payload, err := ParseTurnPayload(info.Payload)
	if err != nil || payload.Turn == "" || payload.Session == "" {
		return TaskCancel{}, store.Errorf(store.CodeInvalid, "task %q names no turn in its payload", taskID)
	}
	res, err := p.Cancel(ctx, caller, payload.Session, payload.Turn)
	if err != nil {
		return TaskCancel{}, err
	}
	out := TaskCancel{Turn: payload.Turn, Stopping: slices.Contains(res.Running, payload.Turn)}
	for _, o := range res.Outputs {
		if o.Type == store.OutputDone && o.Turn == payload.Turn {
			out.Cancelled = true
		}
	}
	if info.State != asynq.TaskStateActive {
		if err := p.queue.Delete(taskID); err != nil {
			return out, err
		}
	}
	return out, nil
}

// Names returns the queue names the planner enqueues under.
func (p *Planner) Names() Names { return p.queue.names }
