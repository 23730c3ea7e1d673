package tasks

import (
	"context"
	"log/slog"
	"time"

	"github.com/balletplanner/ballet/internal/startstop"
	"github.com/balletplanner/ballet/store"
)

// EventNumberInterval is how often an EventNumberer looks for committed
// events to number while events keep coming: the most a new event waits
// before streams can see it. While none come, it looks less and less
// often, down to once every EventNumberIdleInterval, so that an idle
// process costs Postgres a few reads a second.
const (
	EventNumberInterval     = 20 * time.Millisecond
	EventNumberIdleInterval = 250 * time.Millisecond
)

// eventNumberRetry is the wait after a failed numbering.
const eventNumberRetry = time.Second

// EventNumberStore is what an EventNumberer needs of Postgres; *store.DB
// provides it.
type EventNumberStore interface {
	NumberQueuedEvents(ctx context.Context) (bool, error)
}

var _ EventNumberStore = (*store.DB)(nil)

// EventNumberer numbers committed events per organization in the
// background (store.DB.NumberEvents), so that no commit waits on its
// organization's counter. Each api process runs one with its event hub,
// and each worker one of its own; they take turns under the numbering
// lock, so any number of them is safe, and one is enough.
type EventNumberer struct {
	db    EventNumberStore
	every time.Duration
	log   *slog.Logger

	life startstop.Base
}

// NewEventNumberer builds a numberer that looks every EventNumberInterval.
func NewEventNumberer(db EventNumberStore, log *slog.Logger) *EventNumberer {
	if log == nil {
		log = slog.Default()
	}
	return &EventNumberer{db: db, every: EventNumberInterval, log: log}
}

// Start numbers in the background until Stop. It never fails.
func (n *EventNumberer) Start(ctx context.Context) error {
	if _, ok := n.life.StartInit(ctx); ok {
		n.life.Go(n.run)
	}
	return nil
}

// Stop ends the numbering and waits for one under way; safe before Start
// and twice.
func (n *EventNumberer) Stop() { n.life.Stop() }

func (n *EventNumberer) run(ctx context.Context) {
	wait := n.every
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		found, err := n.db.NumberQueuedEvents(ctx)
		if found {
			wait = n.every
		} else {
			wait = min(2*wait, EventNumberIdleInterval)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			wait = eventNumberRetry
			if store.SchemaMissing(err) {
				// Not migrated yet: /readyz says so; wait quietly.
				n.log.DebugContext(ctx, "event numberer: schema not migrated yet", slog.Any("error", err))
			} else {
				n.log.WarnContext(ctx, "event numberer", slog.Any("error", err), slog.Duration("retry_in", eventNumberRetry))
			}
		}
		t.Reset(wait)
	}
}
