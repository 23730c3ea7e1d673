package tasks

import (
	"context"
	"log/slog"

	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/store"
)

// TurnStore is what a Planner needs of Postgres: storing a human message
// with its turn, and cancelling turns. *store.DB provides it.
type TurnStore interface {
	Send(ctx context.Context, caller store.Caller, req store.SendRequest, lim store.QueueLimits) (store.SendResult, error)
	CancelTurns(ctx context.Context, caller store.Caller, sessionID, turnID string) (store.CancelResult, error)
}

var _ TurnStore = (*store.DB)(nil)

// Planner is the api's side of turns: send and cancel. It commits to
// Postgres first, then publishes and enqueues; a failed enqueue is logged
// and left to the workers' sweeper, never lost.
type Planner struct {
	db     TurnStore
	queue  *Queue
	pub    *Publisher
	limits store.QueueLimits
	log    *slog.Logger
}

// NoQueueLimits caps nothing: the limits of a Planner that never sends, such
// as a worker's, which only enqueues a session's next turn. The api's sends
// take the caps of its configuration (server.max_queued_turns and
// server.max_queued_turns_per_project).
var NoQueueLimits = store.QueueLimits{}

// NewPlanner builds a Planner whose sends are refused beyond limits; a zero
// cap is no cap.
func NewPlanner(db TurnStore, queue *Queue, pub *Publisher, limits store.QueueLimits, log *slog.Logger) *Planner {
	return &Planner{db: db, queue: queue, pub: pub, limits: limits, log: log}
}

// Send stores a human message with its turn, interactive, as Submit does.
func (p *Planner) Send(ctx context.Context, caller store.Caller, session, text, turnID string) (store.SendResult, error) {
	return p.Submit(ctx, caller, store.SendRequest{Session: session, Text: text, Turn: turnID})
}

// Submit stores a human message with its turn (req.Priority: interactive
// or batch) under the request id ctx carries, publishes the queued output
// and, when the turn was dispatched at once (scheduler.mode = "fifo"),
// enqueues it; in fair mode the dispatcher enqueues it when a slot is its.
func (p *Planner) Submit(ctx context.Context, caller store.Caller, req store.SendRequest) (store.SendResult, error) {
	req.RequestID = llm.RequestID(ctx)
	res, err := p.db.Send(ctx, caller, req, p.limits)
	if err != nil || res.Existing {
		return res, err
	}
	p.pub.Publish(ctx, res.Queued)
	if res.Head {
		p.enqueue(ctx, req.Session, res.Turn)
	}
	return res, nil
}

// Enqueue puts the task of a turn already marked enqueued in the queue
// (task id = turn id). A failure is logged: the sweeper finds the turn by its
// age and enqueues it again. The task carries no request id: the request
// that sent the turn is not the one (or the turn) that enqueues it now.
func (p *Planner) Enqueue(ctx context.Context, session, turn string) {
	p.enqueue(llm.WithRequestID(ctx, ""), session, turn)
}

// enqueue is Enqueue with the request id ctx carries, for a send.
func (p *Planner) enqueue(ctx context.Context, session, turn string) {
	if err := p.queue.Enqueue(ctx, session, turn, turn); err != nil {
		p.log.WarnContext(ctx, "enqueue turn; the sweeper will retry", slog.String("session", session),
			slog.String("turn", turn), slog.Any("error", err))
	}
}

// Cancel cancels one turn of a session, or all of its open turns: queued
// ones end at once; running ones are flagged and their workers nudged.
func (p *Planner) Cancel(ctx context.Context, caller store.Caller, session, turn string) (store.CancelResult, error) {
	res, err := p.db.CancelTurns(ctx, caller, session, turn)
	if err != nil {
		return res, err
	}
	p.pub.Publish(ctx, res.Outputs...)
	for _, id := range res.Dequeued {
		if err := p.queue.Delete(id); err != nil {
			p.log.WarnContext(ctx, "delete cancelled task", slog.String("turn", id), slog.Any("error", err))
		}
	}
	p.pub.NudgeCancel(ctx, res.Running...)
	if res.Next != "" {
		p.Enqueue(ctx, session, res.Next)
	}
	return res, nil
}
