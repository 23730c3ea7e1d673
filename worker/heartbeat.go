package worker

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/balletplanner/ballet/internal/startstop"
)

// beatStore is where the heartbeat records that this worker is alive; a
// *store.Beater provides it, on a connection of its own that the turns
// cannot take.
type beatStore interface {
	BeatSlots(ctx context.Context, id string, slots int, timeout time.Duration) error
	StopBeating(ctx context.Context, id string) error
	Close()
}

// heartbeat records every interval that this worker process is alive. The
// session leases a worker holds name it, and a lease whose worker's beat
// has expired counts as expired: a killed worker's turns resume within the
// heartbeat timeout, for one write per worker per interval however many
// turns it runs (the per-turn lease is renewed only every lease/3 and is the
// fallback when no beat is recorded). Each beat also offers the worker's
// slots (worker.concurrency) to the dispatcher.
type heartbeat struct {
	db       beatStore
	id       string
	slots    int
	interval time.Duration
	timeout  time.Duration
	log      *slog.Logger
	// lost is called when beats have failed for so long that other workers
	// may already take this one for dead.
	lost func()

	startstop.Base
}

func newHeartbeat(db beatStore, id string, slots int, interval, timeout time.Duration, log *slog.Logger, lost func()) *heartbeat {
	return &heartbeat{db: db, id: id, slots: slots, interval: interval, timeout: timeout, log: log, lost: lost}
}

// beatStopTimeout bounds the heartbeat's Stop: the write that expires its beat.
const beatStopTimeout = 5 * time.Second

// Start records the first beat, so that no lease of this worker exists
// without one, then beats in the background until Stop.
func (h *heartbeat) Start(ctx context.Context) error {
	if _, ok := h.StartInit(ctx); !ok {
		return nil
	}
	if err := h.db.BeatSlots(ctx, h.id, h.slots, h.timeout); err != nil {
		h.StartFailed()
		return fmt.Errorf("worker: heartbeat: %w", err)
	}
	h.Go(h.run)
	return nil
}

func (h *heartbeat) run(ctx context.Context) {
	t := time.NewTicker(h.interval)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		bctx, cancel := context.WithTimeout(ctx, h.timeout)
		err := h.db.BeatSlots(bctx, h.id, h.slots, h.timeout)
		cancel()
		switch {
		case err == nil:
			last = time.Now()
		case ctx.Err() != nil:
			return
		default:
			h.log.WarnContext(ctx, "worker heartbeat", slog.String("worker", h.id), slog.Any("error", err))
			// Another worker may take our turns over from now on: stop them
			// rather than race it (the fencing token would refuse our writes).
			if time.Since(last) > h.timeout-h.interval {
				h.lost()
			}
		}
	}
}

// Stop stops beating and expires this worker's beat at once (within
// beatStopTimeout), so that any lease it still holds is resumed elsewhere
// without waiting for it.
func (h *heartbeat) Stop() {
	if !h.StopRun() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), beatStopTimeout)
	defer cancel()
	if err := h.db.StopBeating(ctx, h.id); err != nil {
		h.log.WarnContext(ctx, "stop worker heartbeat", slog.String("worker", h.id), slog.Any("error", err))
	}
	h.db.Close()
}
