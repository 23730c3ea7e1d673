package api

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tasks"
)

// The dashboard's buttons act on asynq tasks, and Postgres owns the turns
// they run: left to asynq, Cancel hands a running turn back (it resumes)
// and Delete removes a task the sweeper enqueues again. So every mutating
// request of the dashboard's api comes here first (dashboardActions):
// Cancel and Delete on the planner queue cancel the task's turn, as
// planner.cancel does; what cannot be honoured is refused with the reason,
// which the dashboard shows (monitoring_notice.js); the rest, harmless, is
// asynqmon's. docs/operations.md, "The asynq dashboard", has the table.

// queueKind is whose tasks a queue holds.
type queueKind int

// Queue kinds.
const (
	queueForeign   queueKind = iota // not this deployment's
	queuePlanner                    // planner turns
	queueEmbed                      // embedding runs
	queueRetention                  // retention runs
)

// dashboardOutcome is what ballet does with a dashboard action.
type dashboardOutcome int

// Outcomes of dashboardPolicy.
const (
	// passAsynq lets asynqmon do it: harmless, and it does what it says.
	passAsynq dashboardOutcome = iota
	// actOnTurns cancels the turns of the tasks.
	actOnTurns
	// refuse answers the reason and changes nothing.
	refuse
)

// dashboardPolicy decides what an action on a queue of kind k does; the
// reason says why it is refused.
func dashboardPolicy(k queueKind, a dashboardAction) (dashboardOutcome, string) {
	switch {
	case k == queueForeign:
		return refuse, "it is not a queue of this deployment, whose turns are in another database: act on it from the deployment that owns it"
	case a.verb == verbDeleteQueue:
		return refuse, "the workers register their queues again and Postgres enqueues their tasks again, so a deleted queue would come back"
	case a.verb == verbGroup:
		return refuse, "ballet groups no tasks"
	case k == queueRetention, a.verb == verbDeleteCompleted, a.verb == verbRun, a.verb == verbPause:
		// A retention run is one of the schedule's: cancelled, deleted or
		// archived, the next interval runs again. What asynq keeps of
		// completed tasks is a record. Run makes a task's next attempt now
		// (a turn's worker claims the turn, or drops the task when the turn
		// has ended or runs elsewhere). Pause stops workers taking tasks.
		return passAsynq, ""
	case k == queueEmbed:
		return refuse, "embedding follows the changes Postgres marks: a cancelled, deleted or archived embed task is enqueued again within seconds. " +
			"To stop embedding, leave search.embeddings_model empty"
	case a.verb == verbArchive:
		return refuse, "Postgres owns the turn: archived, its task would be enqueued again and the turn would run. Delete cancels the turn instead"
	case a.scope == scopeAll:
		return refuse, "it would cancel every listed turn of every user at once, and not the turns fair scheduling holds back, which the queue does not list. " +
			"Select the turns and use the button of the selection"
	}
	return actOnTurns, ""
}

// queueKind names whose tasks queue holds.
func (s *Server) queueKind(queue string) queueKind {
	if s.planner == nil {
		return queueForeign
	}
	n := s.planner.Names()
	switch queue {
	case n.Queue():
		return queuePlanner
	case n.EmbedQueue():
		return queueEmbed
	case n.RetentionQueue():
		return queueRetention
	}
	return queueForeign
}

// noticeHeader carries what a dashboard action did to turns, which the
// dashboard shows beside its own message (monitoring_notice.js).
const noticeHeader = "Ballet-Notice"

// maxDashboardBatch caps the tasks of one selection.
const maxDashboardBatch = 1000

// dashboardActions is the dashboard api's gate for platform admins: each
// mutating request is matched to its button, then passed to asynqmon,
// carried out on the turns, or refused with the reason.
func (s *Server) dashboardActions(c *fiber.Ctx) error {
	if c.Method() == fiber.MethodGet || c.Method() == fiber.MethodHead || !strings.HasPrefix(c.Path(), MonitoringPath+"/api/") {
		return c.Next()
	}
	if !principal(c).IsPlatformAdmin() {
		return store.Errorf(store.CodeForbidden, "the queue dashboard is read-only for you: its buttons are for platform admins")
	}
	a, vars, ok := matchDashboardAction(c.Method(), c.Path())
	if !ok {
		return store.Errorf(store.CodeInvalid, "%s %s is not an action of the queue dashboard", c.Method(), c.Path())
	}
	queue := vars["qname"]
	outcome, reason := dashboardPolicy(s.queueKind(queue), a)
	switch outcome {
	case passAsynq:
		return c.Next()
	case refuse:
		return &store.Error{Code: store.CodeConflict, Message: fmt.Sprintf("%s on queue %s is refused: %s.", a.name, queue, reason),
			Details: map[string]any{"queue": queue, "action": a.name}}
	}
	if a.scope == scopeOne {
		return s.cancelTaskTurn(c, a, vars["task_id"])
	}
	return s.cancelTaskTurns(c, a)
}

// cancelTaskTurn cancels the turn of one task: Cancel on a turn that had
// already ended is a conflict, Delete deletes its task all the same.
func (s *Server) cancelTaskTurn(c *fiber.Ctx, a dashboardAction, taskID string) error {
	res, err := s.cancelByTask(c, a, taskID)
	if err != nil {
		return err
	}
	switch {
	case res.Stopping:
		c.Set(noticeHeader, fmt.Sprintf("Turn %s is stopping: its worker ends it with done \"cancelled\".", res.Turn))
	case res.Cancelled:
		c.Set(noticeHeader, fmt.Sprintf("Turn %s is cancelled: it ended with done \"cancelled\".", res.Turn))
	default:
		c.Set(noticeHeader, fmt.Sprintf("Task %s deleted; its turn %s had already ended.", taskID, res.Turn))
	}
	return c.SendStatus(fiber.StatusNoContent)
}

// batchRequest is the body of the dashboard's selection buttons.
type batchRequest struct {
	TaskIDs []string `json:"task_ids"`
}

// taskError is why one task of a selection was not acted on.
type taskError struct {
	ID      string `json:"id"`
	Message string `json:"message"`
}

// cancelTaskTurns cancels the turns of the selected tasks, answering as
// asynqmon does (the ids done and the ids not done) with each failure's
// reason beside.
func (s *Server) cancelTaskTurns(c *fiber.Ctx, a dashboardAction) error {
	var req batchRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	if len(req.TaskIDs) > maxDashboardBatch {
		return store.Errorf(store.CodeInvalid, "task_ids: at most %d tasks at once, got %d", maxDashboardBatch, len(req.TaskIDs))
	}
	done, failed, errs := []string{}, []string{}, []taskError{}
	var cancelled, stopping, ended int
	for _, id := range req.TaskIDs {
		res, err := s.cancelByTask(c, a, id)
		if err != nil {
			msg := "internal error"
			if se := store.AsError(err); se != nil {
				msg = se.Message
			} else {
				s.log.ErrorContext(c.UserContext(), "dashboard: cancel a task's turn", slog.String("task", id), slog.Any("error", err))
			}
			failed, errs = append(failed, id), append(errs, taskError{ID: id, Message: msg})
			continue
		}
		done = append(done, id)
		switch {
		case res.Stopping:
			stopping++
		case res.Cancelled:
			cancelled++
		default:
			ended++
		}
	}
	if len(done) > 0 {
		c.Set(noticeHeader, fmt.Sprintf("Turns cancelled: %d; stopping: %d (their workers end them); each ends with done \"cancelled\". Tasks of turns that had already ended: %d.",
			cancelled, stopping, ended))
	}
	if a.verb == verbCancel {
		return c.JSON(fiber.Map{"canceled_ids": done, "error_ids": failed, "errors": errs})
	}
	return c.JSON(fiber.Map{"deleted_ids": done, "failed_ids": failed, "errors": errs})
}

// cancelByTask cancels the turn of a planner task with the caller's
// permission; Cancel on a turn that had already ended is a conflict.
func (s *Server) cancelByTask(c *fiber.Ctx, a dashboardAction, taskID string) (tasks.TaskCancel, error) {
	res, err := s.planner.CancelTask(c.UserContext(), caller(c), taskID)
	if err != nil {
		return res, err
	}
	s.log.InfoContext(c.UserContext(), "dashboard: turn cancelled", slog.String("subject", principal(c).Subject),
		slog.String("action", a.name), slog.String("task", taskID), slog.String("turn", res.Turn),
		slog.Bool("stopping", res.Stopping), slog.Bool("had_ended", res.Ended()))
	if a.verb == verbCancel && res.Ended() {
		return res, store.Errorf(store.CodeConflict, "turn %s had already ended: nothing was cancelled", res.Turn)
	}
	return res, nil
}
