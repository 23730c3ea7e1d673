package retention

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/balletplanner/ballet/store"
)

// The tables a retention run deletes from, the label values of
// ballet_retention_deleted_total.
const (
	Outputs = "planner_outputs"
	Usage   = "usage"
	Events  = "events"
)

var retentionTables = []string{Outputs, Usage, Events}

// retentionMaxBatches caps the batches of one table in one run; what is
// left waits for the next run.
const retentionMaxBatches = 10_000

// retentionStore is what a retention run needs of Postgres.
type retentionStore interface {
	TryRetentionLock(ctx context.Context) (*store.RetentionLock, bool, error)
	ClaimRetentionPeriod(ctx context.Context, period time.Time) (bool, error)
	PruneOutputs(ctx context.Context, cutoff time.Time, batch int) (int64, error)
	RollupUsage(ctx context.Context, cutoff time.Time, batch int) (int64, error)
	PruneEvents(ctx context.Context, cutoff time.Time, batch int) (int64, error)
}

// Report is what one retention run did.
type Report struct {
	// Ran is false when another run held the lock or this period's run was
	// already done.
	Ran bool
	// Period is the start of the retention.interval the run is for.
	Period time.Time
	// Deleted counts the rows deleted by table (usage rows are rolled up
	// into usage_daily first).
	Deleted map[string]int64
}

// retentionHandler runs retention: under the Postgres advisory lock, once
// per period, each table in bounded batches of short transactions.
type retentionHandler struct {
	db      retentionStore
	cfg     Config
	now     func() time.Time
	budget  time.Duration // how long one run may take
	log     *slog.Logger
	deleted *prometheus.CounterVec
}

func newRetentionMetrics(reg prometheus.Registerer) (*prometheus.CounterVec, error) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ballet_retention_deleted_total",
		Help: "Rows deleted by retention, by table (planner_outputs, usage rolled up by day first, events)."},
		[]string{"table"})
	for _, t := range retentionTables {
		c.WithLabelValues(t)
	}
	if reg != nil {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("retention: retention metrics: %w", err)
		}
	}
	return c, nil
}

// process is the asynq handler. A run that fails is logged and not
// retried: the next period's run takes up what is left, and the task's id
// stays free for it.
// The run's report is the task's result, which the dashboard shows while
// the task is kept (retentionKept). The task's payload is only shown: a run
// of a version that enqueued none runs the same.
func (h *retentionHandler) process(ctx context.Context, t *asynq.Task) error {
	rep, err := h.run(ctx, true)
	if err != nil && ctx.Err() == nil {
		h.log.ErrorContext(ctx, "retention run failed", slog.Any("error", err))
	}
	res := retentionResult{Ran: rep.Ran, Period: rep.Period, Deleted: rep.Deleted}
	if err != nil {
		res.Error = err.Error()
	}
	if rw := t.ResultWriter(); rw != nil {
		b, merr := json.Marshal(res)
		if merr == nil {
			_, merr = rw.Write(b)
		}
		if merr != nil {
			h.log.WarnContext(ctx, "write the retention run's result", slog.Any("error", merr))
		}
	}
	return nil
}

// retentionResult is a retention task's result: what the run did.
type retentionResult struct {
	Ran     bool             `json:"ran"`
	Period  time.Time        `json:"period"`
	Deleted map[string]int64 `json:"deleted"`
	Error   string           `json:"error,omitempty"`
}

// run is one retention run; with claim, only the first of its period.
func (h *retentionHandler) run(ctx context.Context, claim bool) (Report, error) {
	ctx, cancel := context.WithTimeout(ctx, h.budget)
	defer cancel()
	now := h.now()
	rep := Report{Period: now.Truncate(h.cfg.Interval).UTC(), Deleted: map[string]int64{}}
	lock, ok, err := h.db.TryRetentionLock(ctx)
	if err != nil || !ok {
		return rep, err
	}
	defer lock.Release(ctx)
	rep.Ran = true
	if claim {
		if rep.Ran, err = h.db.ClaimRetentionPeriod(ctx, rep.Period); err != nil || !rep.Ran {
			return rep, err
		}
	}
	type step struct {
		table  string
		window time.Duration
		cutoff func(time.Duration) time.Time
		prune  func(context.Context, time.Time, int) (int64, error)
	}
	before := func(w time.Duration) time.Time { return now.Add(-w) }
	// Usage goes by whole UTC days, so that a day is either detail or
	// rolled up and a report from a day's start is exact.
	beforeDay := func(w time.Duration) time.Time { return now.Add(-w).UTC().Truncate(24 * time.Hour) }
	var errs []error
	for _, s := range []step{
		{Outputs, h.cfg.Outputs, before, h.db.PruneOutputs},
		{Usage, h.cfg.UsageDetail, beforeDay, h.db.RollupUsage},
		{Events, h.cfg.Events, before, h.db.PruneEvents},
	} {
		if s.window <= 0 {
			continue
		}
		n, err := h.drain(ctx, s.table, s.cutoff(s.window), s.prune)
		rep.Deleted[s.table] = n
		if err != nil {
			errs = append(errs, err)
		}
	}
	h.log.InfoContext(ctx, "retention run", slog.Time("period", rep.Period),
		slog.Int64(Outputs, rep.Deleted[Outputs]), slog.Int64(Usage, rep.Deleted[Usage]),
		slog.Int64(Events, rep.Deleted[Events]))
	return rep, errors.Join(errs...)
}

// drain deletes a table's rows before cutoff batch by batch until a batch
// comes back short, the run's budget is spent or the cap is reached.
func (h *retentionHandler) drain(ctx context.Context, table string, cutoff time.Time,
	prune func(context.Context, time.Time, int) (int64, error)) (int64, error) {
	var total int64
	for range retentionMaxBatches {
		n, err := prune(ctx, cutoff, h.cfg.Batch)
		if err != nil {
			if ctx.Err() != nil {
				return total, nil // the budget is spent: the next run goes on
			}
			return total, fmt.Errorf("retention: retention of %s: %w", table, err)
		}
		total += n
		h.deleted.WithLabelValues(table).Add(float64(n))
		if n < int64(h.cfg.Batch) || ctx.Err() != nil {
			break
		}
	}
	return total, nil
}
