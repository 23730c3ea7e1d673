// Package retention deletes what is older than its [retention] window:
// the outputs of ended turns, usage detail (rolled up by day first) and
// the event log. Its task type and payload (task.go), the retention queue's
// asynq server (server.go), asynq's scheduler enqueueing a run every
// interval (scheduler.go) and the run itself (handler.go) are here; the
// SQL is the store's (store/retention*.go).
package retention

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/balletplanner/ballet/internal/startstop"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tasks"
)

// Deps are what retention needs from its process.
type Deps struct {
	DB       *store.DB
	Redis    redis.UniversalClient
	Names    tasks.Names
	Registry prometheus.Registerer
	Log      *slog.Logger
	// Now is the clock the runs' cutoffs and periods are taken from; nil
	// is time.Now.
	Now func() time.Time
}

// Retention keeps outputs, usage detail and the event log from growing
// forever: asynq's scheduler enqueues a retention task every
// retention.interval (scheduler.go), the retention queue's own
// asynq server runs it (server.go), and the handler deletes, in
// bounded batches, what is older than its window (handler.go).
// Every worker process runs one; the task's id and a period claimed in
// Postgres under an advisory lock make it one run per interval.
type Service struct {
	h   *retentionHandler
	log *slog.Logger
	// services are the queue's server, then the scheduler.
	services *startstop.Group
}

// retentionBudget is how long one run may take: half an interval, at
// most 30 minutes; what is left waits for the next run.
func retentionBudget(interval time.Duration) time.Duration {
	return min(max(interval/2, time.Second), 30*time.Minute)
}

// New builds retention with the [retention] section; its counter
// ballet_retention_deleted_total is registered on d.Registry.
func New(cfg Config, d Deps) (*Service, error) {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	deleted, err := newRetentionMetrics(d.Registry)
	if err != nil {
		return nil, err
	}
	budget := retentionBudget(cfg.Interval)
	h := &retentionHandler{db: d.DB, cfg: cfg, now: d.Now, budget: budget, log: d.Log, deleted: deleted}
	return &Service{h: h, log: d.Log, services: startstop.NewGroup(
		startstop.Named("retention server", newRetentionServer(d.Redis, d.Names, cfg.Interval, h, d.Log)),
		startstop.Named("retention scheduler", newRetentionScheduler(d.Redis, d.Names, cfg.Interval, budget+time.Minute, d.Log)),
	)}, nil
}

// Start runs the retention queue's server and the scheduler. With every
// window 0 (keep forever) it does nothing.
func (r *Service) Start(ctx context.Context) error {
	if !r.h.cfg.Enabled() {
		r.log.InfoContext(ctx, "retention off: outputs, usage detail and events are kept forever")
		return nil
	}
	return r.services.Start(ctx)
}

// Stop stops the scheduler, then the server; safe before Start and twice.
func (r *Service) Stop() { r.services.Stop() }

// RunOnce runs retention now, as the scheduled task does: it does nothing
// (Ran false) while another run holds the lock or when this period's run
// is done.
func (r *Service) RunOnce(ctx context.Context) (Report, error) {
	return r.h.run(ctx, true)
}

// Run runs retention now, for `ballet retention run`: under the
// lock of the scheduled runs, but claiming no period, so it runs whatever
// this period's scheduled run did, and that run still happens. Ran is
// false only while another run holds the lock. It needs no Redis, and
// counts nothing in ballet_retention_deleted_total (it is not a worker's).
func Run(ctx context.Context, cfg Config, db *store.DB, log *slog.Logger) (Report, error) {
	if log == nil {
		log = slog.Default()
	}
	deleted, err := newRetentionMetrics(nil)
	if err != nil {
		return Report{}, err
	}
	h := &retentionHandler{db: db, cfg: cfg, now: time.Now, budget: retentionBudget(cfg.Interval), log: log, deleted: deleted}
	return h.run(ctx, false)
}
