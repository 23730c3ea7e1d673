package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/balletplanner/ballet/internal/startstop"
	"github.com/balletplanner/ballet/store"
)

// budgetWatchInterval is how often the budget states are counted again.
const budgetWatchInterval = 30 * time.Second

// budgetNear is the share of a token budget used from which it counts as
// near exhaustion.
const budgetNear = 0.8

// budgetStates are the state label values of ballet_llm_budgets.
var budgetStates = []string{"ok", "near", "exhausted"}

var budgetsDesc = prometheus.NewDesc("ballet_llm_budgets",
	"Budgets in tokens or money (scopes with a token_budget: projects, and organizations for their own calls) by state in the current period: "+
		"ok, near (80% or more used), exhausted (all used, calls refused); counted every 30s. "+
		"Every gateway reports the same whole count, so aggregate with max(), never sum().",
	[]string{"state"}, nil)

// budgetWatch counts the token budgets by state for ballet_llm_budgets:
// one query lists the budgeted scopes from Postgres, and their counters are
// read from Redis, where the limiter keeps them, in pipelined batches. It
// refreshes at Start and every interval until Stop; a scrape reads the last
// counts, so the metric has three series whatever the number of projects.
// Each pass also reconciles the counters with the usage in Postgres after a
// change of Redis master (budget_reconcile.go).
type budgetWatch struct {
	src      budgetSource
	rdb      redis.UniversalClient
	prefix   string
	now      func() time.Time
	interval time.Duration
	log      *slog.Logger

	mu     sync.Mutex
	counts map[string]float64

	// pass serializes refreshes and guards the reconciliation state.
	pass       sync.Mutex
	master     string          // the Redis master reconciled with; "" before the first pass
	emptySeen  map[string]bool // counter keys found missing with no usage in Postgres
	reconciles *prometheus.CounterVec

	life startstop.Base
}

// budgetSource is what the budget watch reads from Postgres: the budgeted
// scopes, and the usage their calls settled in a period. *store.DB
// provides it, through the Store given to New.
type budgetSource interface {
	BudgetScopes(ctx context.Context) ([]store.BudgetScope, error)
	SettledTokens(ctx context.Context, spans []store.BudgetSpan) (map[string]int64, error)
}

// newBudgetWatch watches the budgets of src's scopes, or returns nil when
// there is no Redis (then no budget is counted).
func newBudgetWatch(src budgetSource, l *limiter, log *slog.Logger) *budgetWatch {
	if l.rdb == nil {
		return nil
	}
	return makeBudgetWatch(src, l.rdb, l.prefix, func() time.Time { return l.now() }, log)
}

// makeBudgetWatch is a budget watch of the scopes in src and their
// counters in rdb under prefix.
func makeBudgetWatch(src budgetSource, rdb redis.UniversalClient, prefix string,
	now func() time.Time, log *slog.Logger) *budgetWatch {
	w := &budgetWatch{src: src, rdb: rdb, prefix: prefix, now: now,
		interval: budgetWatchInterval, log: log, counts: map[string]float64{},
		emptySeen: map[string]bool{}, reconciles: newReconcilesCounter()}
	for _, s := range budgetStates {
		w.counts[s] = 0
	}
	return w
}

// Describe implements prometheus.Collector.
func (w *budgetWatch) Describe(ch chan<- *prometheus.Desc) {
	ch <- budgetsDesc
	w.reconciles.Describe(ch)
}

// Collect implements prometheus.Collector with the last counts.
func (w *budgetWatch) Collect(ch chan<- prometheus.Metric) {
	w.reconciles.Collect(ch)
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range budgetStates {
		ch <- prometheus.MustNewConstMetric(budgetsDesc, prometheus.GaugeValue, w.counts[s], s)
	}
}

// Start counts once and then every interval until Stop.
func (w *budgetWatch) Start(ctx context.Context) error {
	if _, ok := w.life.StartInit(ctx); ok {
		w.life.Go(w.run)
	}
	return nil
}

func (w *budgetWatch) run(ctx context.Context) {
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, w.interval)
		switch err := w.refresh(rctx); {
		case err == nil || ctx.Err() != nil:
		case store.SchemaMissing(err):
			// Not migrated yet: /readyz says so, the next pass counts.
			w.log.DebugContext(rctx, "budget metrics: waiting for the schema")
		default:
			w.log.WarnContext(rctx, "budget metrics: count budgets", slog.Any("error", err))
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Stop ends a running count and stops the refreshes; safe before Start and
// twice.
func (w *budgetWatch) Stop() { w.life.Stop() }

// refresh counts the budgets by state now, after reconciling the counters
// that need it; on error the last counts stay, except that a failed
// reconciliation still counts what was read.
func (w *budgetWatch) refresh(ctx context.Context) error {
	w.pass.Lock()
	defer w.pass.Unlock()
	scopes, err := w.src.BudgetScopes(ctx)
	if err != nil {
		return fmt.Errorf("budget watch: list budgets: %w", err)
	}
	now := w.now().UTC()
	// Read before the counters: a failover in between is seen next pass.
	master, err := redisMaster(ctx, w.rdb)
	if err != nil {
		return err
	}
	used, found, err := w.readCounters(ctx, scopes, now)
	if err != nil {
		return err
	}
	rerr := w.reconcile(ctx, scopes, now, master, used, found)
	counts := map[string]float64{}
	for _, s := range budgetStates {
		counts[s] = 0
	}
	for i, s := range scopes {
		counts[budgetState(used[i], s.Budget)]++
	}
	w.mu.Lock()
	w.counts = counts
	w.mu.Unlock()
	return rerr
}

// budgetBatch is how many keys one pipeline reads or writes.
const budgetBatch = 500

// readCounters reads the scopes' counters of the period that holds now:
// the tokens used, and whether the key exists.
func (w *budgetWatch) readCounters(ctx context.Context, scopes []store.BudgetScope, now time.Time) ([]int64, []bool, error) {
	used, found := make([]int64, len(scopes)), make([]bool, len(scopes))
	for from := 0; from < len(scopes); from += budgetBatch {
		part := scopes[from:min(from+budgetBatch, len(scopes))]
		cmds := make([]*redis.StringCmd, len(part))
		// A pipeline, not MGET: each scope's keys are in its own cluster slot.
		_, err := w.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, s := range part {
				cmds[i] = p.Get(ctx, budgetCounterKey(w.prefix, s.ScopeID, s.Period, s.Unit, now))
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, nil, fmt.Errorf("budget watch: read budget counters: %w", err)
		}
		for i := range part {
			n, err := cmds[i].Int64()
			if err != nil && !errors.Is(err, redis.Nil) {
				return nil, nil, fmt.Errorf("budget watch: read budget counter: %w", err)
			}
			used[from+i], found[from+i] = n, err == nil
		}
	}
	return used, found, nil
}

// budgetState names how much of budget used is: exhausted once the
// limiter refuses calls, near from budgetNear of it.
func budgetState(used, budget int64) string {
	switch {
	case used >= budget:
		return "exhausted"
	case float64(used) >= budgetNear*float64(budget):
		return "near"
	}
	return "ok"
}

// budgetCounterKey is the Redis key of a scope's budget counter in the
// period (day, week or month, UTC) that holds now; a money budget's
// (unit micro_usd) is apart from a token budget's.
func budgetCounterKey(prefix, scopeID, period, unit string, now time.Time) string {
	start, _ := budgetPeriod(now, period)
	if unit == store.BudgetMicroUSD {
		period = unit + ":" + period
	}
	return prefix + "{" + scopeID + "}:budget:" + period + ":" + start.Format("20060102")
}
