package worker

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/balletplanner/ballet/internal/startstop"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tasks"
)

// headRecheck is how long after it was marked enqueued a session's next turn
// may stay unclaimed before the sweeper makes sure its task is in the queue
// and not held by a worker that died before claiming it. A turn committed
// and never enqueued (the api died in between) is marked in its commit, so
// it waits this long, plus up to one sweep, before it is enqueued.
const headRecheck = 2 * time.Second

// sweepStore is what the sweeper finds stranded turns in, and where it
// forgets workers gone long ago; the store (*store.DB) provides it.
type sweepStore interface {
	StaleLeases(ctx context.Context, limit int) ([]store.TurnRef, error)
	TakeDueHeads(ctx context.Context, recheck time.Duration, limit int) ([]store.TurnRef, error)
	ForgetWorkers(ctx context.Context, before time.Time) error
}

// sweeper resumes what would otherwise be stranded, every tick:
//   - a running turn whose worker stopped beating (SIGKILL, a lost host) or
//     whose lease ran out or was handed back gets a resume task, keyed by
//     the stale fencing token so that every worker's sweeper enqueues it
//     once;
//   - a session's next turn that was never enqueued, or whose task is not in
//     the queue, or is held active without the turn being claimed,
//     headRecheck after it was marked enqueued (the process died between
//     commit and enqueue, Redis lost it, a worker died between dequeue and
//     claim), is enqueued again, by one worker's sweeper only.
//
// A task id that is held by an active task is never taken for a resume:
// tasks.Queue.EnqueueFresh moves on to a fresh id.
type sweeper struct {
	db      sweepStore
	queue   *tasks.Queue
	every   time.Duration
	forget  time.Duration
	log     *slog.Logger
	metrics *metrics

	startstop.Base
	lastForget time.Time
}

// registerEvery is how often a worker registers its queues with asynq.
const registerEvery = 5 * time.Second

func newSweeper(db sweepStore, queue *tasks.Queue, every, forget time.Duration, log *slog.Logger, m *metrics) *sweeper {
	return &sweeper{db: db, queue: queue, every: every, forget: forget, log: log, metrics: m}
}

// Start sweeps every tick in the background until Stop; Stop (Base's)
// waits for the sweep running, if any.
func (s *sweeper) Start(ctx context.Context) error {
	if _, ok := s.StartInit(ctx); ok {
		s.Go(s.run)
	}
	return nil
}

func (s *sweeper) run(ctx context.Context) {
	t := time.NewTicker(s.every)
	defer t.Stop()
	var registered time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if time.Since(registered) >= registerEvery {
				// After Redis lost its data, asynq's registry of queues is
				// empty until each is enqueued to again.
				if err := s.queue.Register(ctx); err != nil && ctx.Err() == nil {
					s.log.WarnContext(ctx, "sweep", slog.Any("error", err))
				} else {
					registered = time.Now()
				}
			}
			if err := s.sweepOnce(ctx); err != nil && ctx.Err() == nil {
				s.log.WarnContext(ctx, "sweep", slog.Any("error", err))
			}
		}
	}
}

func (s *sweeper) sweepOnce(ctx context.Context) error {
	stale, err := s.db.StaleLeases(ctx, 100)
	if err != nil {
		return fmt.Errorf("worker: sweep: %w", err)
	}
	for _, r := range stale {
		id, res, err := s.queue.EnqueueFresh(ctx, r.Session, r.Turn, fmt.Sprintf("%s:resume:%d", r.Turn, r.Token))
		if err != nil {
			s.log.WarnContext(ctx, "resume turn", slog.String("turn", r.Turn), slog.Any("error", err))
			continue
		}
		if res != tasks.ResumeWaiting {
			s.metrics.resumes.WithLabelValues(r.Stale).Inc()
			s.log.InfoContext(ctx, "resuming turn", slog.String("session", r.Session), slog.String("turn", r.Turn),
				slog.String("reason", r.Stale), slog.String("task", id))
		}
	}
	// Each due head is taken (and marked for a look again headRecheck
	// later) by exactly one worker's sweep, which enqueues it again.
	heads, err := s.db.TakeDueHeads(ctx, headRecheck, 100)
	if err != nil {
		return fmt.Errorf("worker: sweep: %w", err)
	}
	for _, h := range heads {
		id, res, err := s.queue.EnqueueFresh(ctx, h.Session, h.Turn, h.Turn)
		if err != nil {
			s.log.WarnContext(ctx, "enqueue queued turn", slog.String("turn", h.Turn), slog.Any("error", err))
			continue
		}
		switch res {
		case tasks.ResumeEnqueued:
			s.metrics.resumes.WithLabelValues(resumeNotQueued).Inc()
			s.log.WarnContext(ctx, "queued turn missing from the queue; enqueued again", slog.String("session", h.Session),
				slog.String("turn", h.Turn), slog.String("task", id))
		case tasks.ResumeBesideActive:
			// Taken by a worker that has not claimed it since: a dead one,
			// or a live one on a busy machine (then the extra task finds
			// the turn claimed and is dropped).
			s.metrics.resumes.WithLabelValues(resumeUnclaimed).Inc()
			s.log.InfoContext(ctx, "queued turn taken but not claimed; enqueued beside it", slog.String("session", h.Session),
				slog.String("turn", h.Turn), slog.String("task", id))
		}
	}
	if time.Since(s.lastForget) > s.forget {
		s.lastForget = time.Now()
		if err := s.db.ForgetWorkers(ctx, time.Now().Add(-s.forget)); err != nil {
			return fmt.Errorf("worker: sweep: %w", err)
		}
	}
	return nil
}

// resumeNotQueued labels a queued turn found missing from the queue.
const resumeNotQueued = "not_queued"

// resumeUnclaimed labels a queued turn whose task a worker took and did
// not claim within headRecheck.
const resumeUnclaimed = "unclaimed"
