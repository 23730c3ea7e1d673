package worker

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// sweep resumes what would otherwise be stranded, every second:
//   - a running turn whose worker stopped renewing its lease (SIGKILL, a
//     lost host) gets a resume task, keyed by the expired fencing token so
//     that every worker's sweeper enqueues it once;
//   - a session's next turn that was never enqueued, or whose task is not in
//     the queue a lease after it was enqueued (the process died between
//     commit and enqueue, or Redis lost it), is enqueued again.
func (w *Worker) sweep(ctx context.Context) {
	defer w.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := w.sweepOnce(ctx); err != nil && ctx.Err() == nil {
				w.log.WarnContext(ctx, "sweep", slog.Any("error", err))
			}
		}
	}
}

func (w *Worker) sweepOnce(ctx context.Context) error {
	stale, err := w.d.DB.StaleLeases(ctx, 100)
	if err != nil {
		return err
	}
	for _, s := range stale {
		id := fmt.Sprintf("%s:resume:%d", s.Turn, s.Token)
		if err := w.d.Queue.Enqueue(ctx, s.Session, s.Turn, id); err != nil {
			return err
		}
		w.log.InfoContext(ctx, "lease expired; resuming turn", slog.String("session", s.Session), slog.String("turn", s.Turn))
	}
	heads, err := w.d.DB.QueuedHeads(ctx, 2*time.Second, time.Now().Add(-w.cfg.Lease), 100)
	if err != nil {
		return err
	}
	for _, h := range heads {
		if h.Enqueued != nil {
			there, err := w.d.Queue.Exists(h.Turn)
			if err != nil {
				continue
			}
			if there {
				// Waiting its turn in a busy queue: look again a lease later,
				// and let the heads behind it be looked at meanwhile.
				if err := w.d.DB.MarkEnqueued(ctx, h.Turn); err != nil {
					return err
				}
				continue
			}
			w.log.WarnContext(ctx, "queued turn missing from the queue; enqueueing again", slog.String("turn", h.Turn))
		}
		w.planners.EnqueueTurn(ctx, h.Session, h.Turn)
	}
	return nil
}
