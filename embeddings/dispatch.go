package embeddings

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/balletplanner/ballet/internal/startstop"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tasks"
)

// Timings of the embed dispatcher.
const (
	// embedSweepEvery is the backstop: dirty scopes are read this often
	// whatever the notifications, for a notification lost with its
	// connection, and for a scope marked while its task was running.
	embedSweepEvery = 3 * time.Second
	embedDirtyPage  = 1000                   // scopes one read turns into tasks
	embedMinGap     = 200 * time.Millisecond // between two reads
)

// ListenerName is the application_name of the embed dispatcher's LISTEN
// connection, for finding it in pg_stat_activity.
const ListenerName = store.EmbedListenerName

// dirtyStore is what the dispatcher reads of Postgres: the scopes marked
// dirty; *store.DB provides it.
type dirtyStore interface {
	DirtyEmbedScopes(ctx context.Context, limit int) ([]store.EmbedScope, error)
}

var _ dirtyStore = (*store.DB)(nil)

// embedEnqueuer puts a scope's embed task in the embed queue, coalescing
// with one waiting there; *Tasks provides it.
type embedEnqueuer interface {
	EnqueueEmbed(ctx context.Context, s store.EmbedScope) (bool, error)
}

// embedDispatcher turns dirty marks into embed tasks: it LISTENs on
// store.EmbedDirtyChannel over a connection of its own and, on each
// notification and every embedSweepEvery, reads the dirty scopes and
// enqueues each (a scope's task already waiting absorbs the mark). Every
// worker runs one; their enqueues coalesce by task id.
type embedDispatcher struct {
	db     dirtyStore
	listen func(ctx context.Context) (*pgx.Conn, error)
	queue  embedEnqueuer
	log    *slog.Logger

	kick chan struct{}
	startstop.Base
}

func newEmbedDispatcher(db dirtyStore, listen func(ctx context.Context) (*pgx.Conn, error), queue embedEnqueuer, log *slog.Logger) *embedDispatcher {
	return &embedDispatcher{db: db, listen: listen, queue: queue, log: log, kick: make(chan struct{}, 1)}
}

// Start runs the listener and the dispatch loop until Stop, which waits for
// both; a database that cannot be reached is retried in the background.
func (d *embedDispatcher) Start(ctx context.Context) error {
	if _, ok := d.StartInit(ctx); ok {
		d.Go(d.listenLoop)
		d.Go(d.dispatchLoop)
	}
	return nil
}

// wake asks for a read of the dirty scopes now.
func (d *embedDispatcher) wake() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// listenLoop holds the LISTEN connection, reconnecting with backoff, and
// wakes the dispatch loop on each notification and each (re)connect.
func (d *embedDispatcher) listenLoop(ctx context.Context) {
	tasks.Listener{
		Name:    "embed dispatcher",
		Connect: d.listen,
		// Whatever was marked while nobody listened.
		Connected: func(context.Context, bool) { d.wake() },
		Notify:    func(context.Context, string) { d.wake() },
		Log:       d.log,
	}.Run(ctx)
}

// dispatchLoop reads the dirty scopes on each wake and every
// embedSweepEvery, and enqueues their tasks.
func (d *embedDispatcher) dispatchLoop(ctx context.Context) {
	t := time.NewTicker(embedSweepEvery)
	defer t.Stop()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.kick:
		case <-t.C:
		}
		// Notifications come with every commit that marks; under a burst,
		// one read per embedMinGap takes them all.
		if wait := embedMinGap - time.Since(last); wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		last = time.Now()
		if err := d.dispatch(ctx); err != nil && ctx.Err() == nil {
			d.log.WarnContext(ctx, "embed dispatcher: enqueue dirty scopes; retrying at the next sweep", slog.Any("error", err))
		}
	}
}

// dispatch enqueues an embed task for each dirty scope (oldest mark first).
func (d *embedDispatcher) dispatch(ctx context.Context) error {
	scopes, err := d.db.DirtyEmbedScopes(ctx, embedDirtyPage)
	if err != nil {
		return err
	}
	for _, s := range scopes {
		if _, err := d.queue.EnqueueEmbed(ctx, s); err != nil {
			return err
		}
	}
	return nil
}
