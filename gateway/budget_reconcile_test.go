package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/balletplanner/ballet/internal/redistest"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
)

// reconciled is ballet_llm_budget_reconciles_total{reason} of w.
func reconciled(t testing.TB, w *budgetWatch, reason string) float64 {
	t.Helper()
	var m dto.Metric
	if err := w.reconciles.WithLabelValues(reason).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestBudgetReconcile: a pass on a Redis master the watch has not seen
// (its first, then a Redis restarted empty) raises every budgeted scope's
// counter of the current period to the tokens (input, output and cache)
// its usage rows and rolled-up days settled in the period; a counter
// already higher is not lowered; usage of other periods, of a project
// under an organization's budget and of a scope without a budget is not
// counted, and no counter is made for a scope without a budget. On the
// same master a lowered counter stays, and a lost one is seeded again.
func TestBudgetReconcile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	now := time.Date(2030, 6, 18, 12, 0, 0, 0, time.UTC) // a Tuesday
	insert := func(q string, args ...any) string {
		t.Helper()
		var id string
		if err := db.Pool().QueryRow(ctx, q, args...).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	org := insert(`INSERT INTO organizations (key, name) VALUES ('acme', 'Acme') RETURNING id::text`)
	org2 := insert(`INSERT INTO organizations (key, name) VALUES ('globex', 'Globex') RETURNING id::text`)
	project := func(org, key string) string {
		return insert(`INSERT INTO projects (organization_id, key, name) VALUES ($1, $2, $2) RETURNING id::text`, org, key)
	}
	day, week, month, none := project(org, "DAY"), project(org, "WEEK"), project(org, "MONTH"), project(org, "NONE")
	inherits := project(org2, "INHERITS") // takes globex's budget, with counters of its own
	for _, l := range []store.Limits{
		{OrganizationID: org, ProjectID: day, TokenBudget: int64p(200), BudgetPeriod: store.BudgetDay},
		{OrganizationID: org, ProjectID: week, TokenBudget: int64p(10_000), BudgetPeriod: store.BudgetWeek},
		{OrganizationID: org, ProjectID: month, TokenBudget: int64p(10_000), BudgetPeriod: store.BudgetMonth},
		{OrganizationID: org, ProjectID: none, RequestsPerMinute: int64p(100)},
		{OrganizationID: org2, TokenBudget: int64p(10_000), BudgetPeriod: store.BudgetMonth},
	} {
		if _, err := db.PutLimits(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	var rows []store.Usage
	use := func(org, project string, at time.Time, in, out, cacheRead, cacheWrite int64) {
		rows = append(rows, store.Usage{RequestID: fmt.Sprintf("req-%d", len(rows)), OrganizationID: org, ProjectID: project,
			Caller: "planner:test", Provider: store.ProviderAnthropic, Model: "claude-test", Status: 200,
			InputTokens: in, OutputTokens: out, CacheReadTokens: cacheRead, CacheWriteTokens: cacheWrite, CreatedAt: at})
	}
	at := func(d, h, m int) time.Time { return time.Date(2030, 6, d, h, m, 0, 0, time.UTC) }
	use(org, day, at(18, 1, 0), 100, 50, 20, 5)     // 175
	use(org, day, at(18, 23, 59), 20, 5, 0, 0)      // 25: the day's 200
	use(org, day, at(17, 23, 59), 1000, 0, 0, 0)    // yesterday
	use(org, day, at(19, 0, 0), 1000, 0, 0, 0)      // tomorrow
	use(org, week, at(17, 0, 0), 400, 100, 0, 0)    // Monday: 500 of the week
	use(org, week, at(16, 23, 0), 9000, 0, 0, 0)    // the Sunday before
	use(org, month, at(2, 8, 0), 300, 100, 0, 0)    // 400 of June
	use(org, none, at(18, 8, 0), 900, 0, 0, 0)      // no budget
	use(org2, "", at(18, 9, 0), 200, 50, 0, 0)      // globex's own calls: 250
	use(org2, inherits, at(18, 9, 0), 50, 10, 0, 0) // 60, the project's alone
	if n, err := db.InsertUsage(ctx, rows); err != nil || n != int64(len(rows)) {
		t.Fatalf("insert usage: %d rows (%v), want %d", n, err, len(rows))
	}
	// Days of the week already rolled up count too, days before it do not.
	if _, err := db.Pool().Exec(ctx, `INSERT INTO usage_daily (organization_id, project_id, day, caller, provider, model,
    requests, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens)
VALUES ($1, $2, '2030-06-17', 'planner:old', 'anthropic', 'claude-test', 3, 200, 80, 10, 10),
       ($1, $2, '2030-06-16', 'planner:old', 'anthropic', 'claude-test', 3, 5000, 0, 0, 0)`, org, week); err != nil {
		t.Fatal(err)
	}

	rdb := redistest.Start(t).Client(t)
	w := makeBudgetWatch(db, rdb, "gw:", func() time.Time { return now }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	key := func(scope, period string) string {
		return budgetCounterKey("gw:", scope, period, store.BudgetTokens, now)
	}
	if err := rdb.Set(ctx, key(month, store.BudgetMonth), 5000, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{ // every budgeted scope's counter after a pass on a new master
		key(day, store.BudgetDay):        200,
		key(week, store.BudgetWeek):      800,
		key(month, store.BudgetMonth):    5000, // above the 400 used: not lowered
		key(org2, store.BudgetMonth):     250,
		key(inherits, store.BudgetMonth): 60,
	}
	check := func(rdb *redis.Client, want map[string]int64) {
		t.Helper()
		keys, err := rdb.Keys(ctx, "gw:*").Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) != len(want) {
			t.Errorf("counters %v, want %d: %v", keys, len(want), want)
		}
		for k, n := range want {
			if got, err := rdb.Get(ctx, k).Int64(); got != n || err != nil {
				t.Errorf("%s = %d (%v), want %d", k, got, err, n)
			}
		}
	}
	pass := func(wantMaster, wantMissing float64) {
		t.Helper()
		if err := w.refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if m, s := reconciled(t, w, reconcileMaster), reconciled(t, w, reconcileMissing); m != wantMaster || s != wantMissing {
			t.Fatalf("reconciles master %v, missing %v; want %v, %v", m, s, wantMaster, wantMissing)
		}
	}

	pass(1, 0) // the first pass: the master is new to the watch
	check(rdb, want)
	for k := range want {
		if k == key(month, store.BudgetMonth) {
			continue
		}
		_, end := budgetPeriod(now, store.BudgetMonth)
		if k == key(day, store.BudgetDay) {
			_, end = budgetPeriod(now, store.BudgetDay)
		} else if k == key(week, store.BudgetWeek) {
			_, end = budgetPeriod(now, store.BudgetWeek)
		}
		ttl, err := rdb.PTTL(ctx, k).Result()
		if limit := end.Sub(now) + time.Hour; err != nil || ttl > limit || ttl < limit-time.Minute {
			t.Errorf("%s expires in %s (%v), want the limiter's %s", k, ttl, err, limit)
		}
	}
	w.mu.Lock()
	counts := fmt.Sprint(w.counts)
	w.mu.Unlock()
	if counts != "map[exhausted:1 near:0 ok:4]" {
		t.Errorf("budget states %s, want the day's project exhausted by its reconciled counter", counts)
	}

	// The same master: a counter below the usage stays as it is (the pass
	// reads run_id and the counters, nothing more), a lost one is seeded.
	if err := rdb.Set(ctx, key(week, store.BudgetWeek), 50, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	pass(1, 0)
	if err := rdb.Del(ctx, key(day, store.BudgetDay)).Err(); err != nil {
		t.Fatal(err)
	}
	pass(1, 1)
	check(rdb, map[string]int64{key(week, store.BudgetWeek): 50, key(day, store.BudgetDay): 200,
		key(month, store.BudgetMonth): 5000, key(org2, store.BudgetMonth): 250, key(inherits, store.BudgetMonth): 60})

	// A Redis restarted without persistence: a new run_id, no counters.
	restarted := redistest.Start(t).Client(t)
	w.rdb = restarted
	pass(2, 1)
	want[key(month, store.BudgetMonth)] = 400
	check(restarted, want)
	if _, err := restarted.Get(ctx, key(none, store.BudgetMonth)).Result(); !errors.Is(err, redis.Nil) {
		t.Errorf("a scope without a budget has a counter: %v", err)
	}
}

// TestBudgetReconcileMoney raises a money budget's counter, on its own key,
// to the cost of the period's calls (unpriced ones count nothing), and
// counts its state in ballet_llm_budgets.
func TestBudgetReconcileMoney(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	now := time.Date(2030, 6, 18, 12, 0, 0, 0, time.UTC)
	var org, project string
	if err := db.Pool().QueryRow(ctx, `INSERT INTO organizations (key, name) VALUES ('acme', 'Acme') RETURNING id::text`).Scan(&org); err != nil {
		t.Fatal(err)
	}
	if err := db.Pool().QueryRow(ctx, `INSERT INTO projects (organization_id, key, name) VALUES ($1, 'WEB', 'Web') RETURNING id::text`, org).Scan(&project); err != nil {
		t.Fatal(err)
	}
	if _, err := db.PutLimits(ctx, store.Limits{OrganizationID: org, ProjectID: project, TokenBudget: int64p(1000),
		BudgetUnit: store.BudgetMicroUSD, BudgetPeriod: store.BudgetDay, UpdatedBy: "alice"}); err != nil {
		t.Fatal(err)
	}
	var rows []store.Usage
	for i, c := range []*int64{int64p(600), nil, int64p(250), int64p(9000)} {
		at := now.Add(-time.Duration(i) * time.Hour)
		if i == 3 {
			at = now.AddDate(0, 0, -1) // yesterday's
		}
		rows = append(rows, store.Usage{RequestID: fmt.Sprintf("req-%d", i), OrganizationID: org, ProjectID: project,
			Caller: "planner:test", Provider: store.ProviderAnthropic, Model: "claude-test", Status: 200,
			InputTokens: 100, OutputTokens: 10, CostMicroUSD: c, CreatedAt: at})
	}
	if _, err := db.InsertUsage(ctx, rows); err != nil {
		t.Fatal(err)
	}
	rdb := redistest.Start(t).Client(t)
	w := makeBudgetWatch(db, rdb, "gw:", func() time.Time { return now }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := w.refresh(ctx); err != nil {
		t.Fatal(err)
	}
	keys, err := rdb.Keys(ctx, "gw:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	money := budgetCounterKey("gw:", project, store.BudgetDay, store.BudgetMicroUSD, now)
	if got, err := rdb.Get(ctx, money).Int64(); len(keys) != 1 || got != 850 || err != nil {
		t.Fatalf("counters %v, %s = %d (%v); want only it, at 850 micro-USD", keys, money, got, err)
	}
	w.mu.Lock()
	counts := fmt.Sprint(w.counts)
	w.mu.Unlock()
	if counts != "map[exhausted:0 near:1 ok:0]" {
		t.Errorf("budget states %s, want the money budget near (850 of 1000)", counts)
	}
}
