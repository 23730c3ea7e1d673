package dispatch

import (
	"context"
	"log/slog"
	"time"

	"github.com/balletplanner/ballet/internal/requestid"
	"github.com/balletplanner/ballet/internal/tracing"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tasks"
)

// staggerShare is the part of the mean time between two slots freeing that
// staggered starts keep between them: a little less, so that staggering
// never starts turns slower than the pool frees slots.
const staggerShare = 0.9

// stagger is the least time between two staggered starts.
func (s *session) stagger() time.Duration {
	if s.slots <= 0 {
		return 0
	}
	return time.Duration(staggerShare * s.tree.estimate / float64(s.slots) * float64(time.Second))
}

// wakeAt makes the loop step again at t.
func (s *session) wakeAt(t time.Time) {
	d := max(time.Until(t), time.Millisecond)
	if s.paced == nil {
		s.paced = time.AfterFunc(d, s.d.poke)
		return
	}
	s.paced.Reset(d)
}

// dispatch starts a ready turn for every free slot: picked from the tree,
// its task enqueued (task id = turn id). Nothing is written to Postgres:
// the tree remembers the turn in flight, a worker's claim shows it in
// Postgres, and confirm sees to a task that no worker claimed. A leader
// that takes over finds such a turn ready and dispatches it again, which
// the task id makes a no-op while the first task waits or runs. A turn
// that ended meanwhile gets a task that finds it ended and is dropped; its
// end, notified, frees the slot.
//
// Starts are staggered while turns are held back: an organization at or
// over its share of the slots starts at most one turn every stagger(), the
// time in which the pool frees a slot on average. Turns started together
// end together, and a pool whose slots all free at once makes a newcomer
// wait a whole turn for the next; spread out, some slot frees every
// stagger(). An organization under its share is never held back, and
// neither is anyone while nothing waits, so a lone organization still
// fills the pool at once.
func (s *session) dispatch(ctx context.Context) error {
	for range batchMax {
		if s.slots-s.tree.inflight <= 0 {
			return nil
		}
		now := time.Now()
		var it *item
		next := s.lastStart.Add(s.stagger())
		if s.tree.backlog() > s.slots-s.tree.inflight && now.Before(next) {
			if it = s.tree.pickUnderShare(now, s.slots); it == nil {
				s.wakeAt(next)
				return nil
			}
		} else if it = s.tree.pick(now); it == nil {
			return nil
		}
		t := it.turn
		var err error
		s.d.thread.enqueue(func() { err = s.d.queue.Enqueue(turnContext(ctx, t.RequestID, t.TraceContext), t.Session, t.ID, t.ID) })
		if err != nil {
			// Redis refused: the turn waits ready again, and the next
			// step tries again.
			s.tree.putBack(it)
			s.d.log.WarnContext(ctx, "dispatcher: enqueue turn; trying again", slog.String("turn", t.ID), slog.Any("error", err))
			return nil
		}
		s.lastStart, it.dispatchedAt = now, now
		s.d.metrics.dispatched(it, now)
	}
	return nil
}

// confirm makes sure that every turn this leader dispatched confirmAfter
// ago or more, and that no worker has claimed yet, has a task that will
// reach a worker: its task may have been lost (Redis lost its data), or a
// worker may have taken it and died before it claimed the turn. A claimed
// or ended turn is confirmed and not looked at again.
func (s *session) confirm(ctx context.Context, now time.Time) error {
	var ids []string
	for id, it := range s.tree.items {
		if it.inflight && !it.confirmed && now.Sub(it.dispatchedAt) >= confirmAfter {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	open, err := s.conn.Unclaimed(ctx, ids)
	if err != nil {
		return err
	}
	unclaimed := make(map[string]store.UnclaimedTurn, len(open))
	for _, u := range open {
		unclaimed[u.Turn] = u
	}
	for _, id := range ids {
		it := s.tree.items[id]
		u, ok := unclaimed[id]
		if !ok {
			it.confirmed = true
			continue
		}
		it.dispatchedAt = now
		task, res, err := s.d.queue.EnqueueFresh(turnContext(ctx, u.RequestID, u.TraceContext), u.Session, u.Turn, u.Turn)
		switch {
		case err != nil:
			s.d.log.WarnContext(ctx, "dispatcher: enqueue unclaimed turn; trying again", slog.String("turn", id), slog.Any("error", err))
		case res == tasks.ResumeEnqueued:
			s.d.log.WarnContext(ctx, "dispatched turn missing from the queue; enqueued again", slog.String("session", u.Session),
				slog.String("turn", id), slog.String("task", task))
		case res == tasks.ResumeBesideActive:
			s.d.log.InfoContext(ctx, "dispatched turn taken but not claimed; enqueued beside it", slog.String("session", u.Session),
				slog.String("turn", id), slog.String("task", task))
		}
	}
	return nil
}

// turnContext is ctx carrying what a turn's task carries of the send that
// stored it: its request id and its trace context.
func turnContext(ctx context.Context, requestID string, trace map[string]string) context.Context {
	return tracing.Extract(requestid.With(ctx, requestID), trace)
}
