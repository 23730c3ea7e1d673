package api

import (
	"context"
	"log/slog"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/balletplanner/ballet/internal/startstop"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tasks"
)

// accessWatch wakes the rechecks of a subject's open watches and streams
// as soon as Postgres announces that the subject's access shrank (a role
// binding removed, a token revoked: store.AccessChannel), on one LISTEN
// connection per api process. Without it a revoked subject's streams ran
// on until their periodic recheck (server.stream_recheck). When the
// connection comes back after a loss, every stream checks again: what
// was announced meanwhile is lost.
type accessWatch struct {
	db  *store.DB
	log *slog.Logger

	mu      sync.Mutex
	subject map[string]map[chan struct{}]struct{}

	startstop.Base
}

func newAccessWatch(db *store.DB, log *slog.Logger) *accessWatch {
	return &accessWatch{db: db, log: log, subject: map[string]map[chan struct{}]struct{}{}}
}

// Start holds the LISTEN connection in the background until Stop, which
// waits for it to close.
func (a *accessWatch) Start(ctx context.Context) error {
	if _, ok := a.StartInit(ctx); !ok {
		return nil
	}
	a.Go(func(ctx context.Context) {
		tasks.Listener{
			Name:    "access listener",
			Connect: func(ctx context.Context) (*pgx.Conn, error) { return a.db.ListenAccess(ctx) },
			Connected: func(ctx context.Context, reconnect bool) {
				if reconnect {
					a.log.InfoContext(ctx, "access listener reconnected; every stream checks its access again")
					a.wakeAll()
				}
			},
			Notify: func(_ context.Context, subject string) { a.wake(subject) },
			Log:    a.log,
		}.Run(ctx)
	})
	return nil
}

// watch returns what is signalled when subject's access changes; the
// caller passes it to unwatch when its stream ends.
func (a *accessWatch) watch(subject string) chan struct{} {
	ch := make(chan struct{}, 1)
	a.mu.Lock()
	defer a.mu.Unlock()
	set := a.subject[subject]
	if set == nil {
		set = map[chan struct{}]struct{}{}
		a.subject[subject] = set
	}
	set[ch] = struct{}{}
	return ch
}

func (a *accessWatch) unwatch(subject string, ch chan struct{}) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.subject[subject], ch)
	if len(a.subject[subject]) == 0 {
		delete(a.subject, subject)
	}
}

func (a *accessWatch) wake(subject string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for ch := range a.subject[subject] {
		signal(ch)
	}
}

func (a *accessWatch) wakeAll() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, set := range a.subject {
		for ch := range set {
			signal(ch)
		}
	}
}

// signal marks ch without blocking: one pending wake-up is enough.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
