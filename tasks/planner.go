package tasks

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/balletplanner/ballet/internal/requestid"
	"github.com/balletplanner/ballet/internal/tracing"
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
//
// It is the turn's first span, planner.send: a child of the client's trace
// when ctx carries one, else the root of a new trace; the turn keeps its
// trace context, so that every process that handles the turn adds to it.
func (p *Planner) Submit(ctx context.Context, caller store.Caller, req store.SendRequest) (res store.SendResult, err error) {
	ctx, span := tracing.StartSpan(ctx, tracer, "planner.send", trace.SpanKindServer)
	defer func() {
		if span.IsRecording() {
			span.SetAttributes(attribute.String("ballet.session", req.Session), attribute.String("ballet.turn", res.Turn),
				attribute.Int64("ballet.position", res.Position), attribute.Bool("ballet.existing", res.Existing))
		}
		tracing.EndSpan(span, err)
	}()
	req.RequestID = requestid.From(ctx)
	req.TraceContext = tracing.Inject(ctx)
	res, err = p.db.Send(ctx, caller, req, p.limits)
	if err != nil || res.Existing {
		return res, err
	}
	if req.Multitask == store.MultitaskInterrupt {
		p.cancelled(ctx, req.Session, res.Interrupted)
	}
	p.pub.Publish(ctx, res.Queued)
	if res.Head {
		p.enqueue(ctx, req.Session, res.Turn)
	}
	return res, nil
}

// tracer makes the spans of the tasks package.
var tracer = tracing.Tracer("github.com/balletplanner/ballet/tasks")

// Enqueue puts the task of a turn already marked enqueued in the queue
// (task id = turn id). A failure is logged: the sweeper finds the turn by its
// age and enqueues it again. The task carries no request id: the request
// that sent the turn is not the one (or the turn) that enqueues it now.
func (p *Planner) Enqueue(ctx context.Context, session, turn string) {
	// Nor the trace of ctx (another turn's): the worker takes the turn's
	// own from Postgres.
	p.enqueue(tracing.Detach(requestid.With(ctx, "")), session, turn)
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
//
// It is a planner.cancel span of the caller's trace (the cancelled turns'
// attempts end with ballet.done_reason=cancelled in theirs).
func (p *Planner) Cancel(ctx context.Context, caller store.Caller, session, turn string) (res store.CancelResult, err error) {
	ctx, span := tracing.StartSpan(ctx, tracer, "planner.cancel", trace.SpanKindServer)
	defer func() {
		if span.IsRecording() {
			span.SetAttributes(attribute.String("ballet.session", session), attribute.String("ballet.turn", turn),
				attribute.StringSlice("ballet.dequeued", res.Dequeued), attribute.StringSlice("ballet.stopping", res.Running))
		}
		tracing.EndSpan(span, err)
	}()
	res, err = p.db.CancelTurns(ctx, caller, session, turn)
	if err != nil {
		return res, err
	}
	p.cancelled(ctx, session, res)
	return res, nil
}

// cancelled does what follows a committed cancel: it publishes the done
// outputs, deletes the tasks of cancelled turns, nudges the workers of
// running ones and enqueues the turn the cancel freed.
func (p *Planner) cancelled(ctx context.Context, session string, res store.CancelResult) {
	p.publishCancelled(ctx, res)
	for _, id := range res.Dequeued {
		if err := p.queue.Delete(id); err != nil {
			p.log.WarnContext(ctx, "delete cancelled task", slog.String("turn", id), slog.Any("error", err))
		}
	}
	p.pub.NudgeCancel(ctx, res.Running...)
	if res.Next != "" {
		p.Enqueue(ctx, session, res.Next)
	}
}
