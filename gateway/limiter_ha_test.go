package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/balletplanner/ballet/internal/redistest"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
)

// limitStatus is the status of a *limitError, 0 for none.
func limitStatus(err error) int {
	var le *limitError
	if errors.As(err, &le) {
		return le.status
	}
	return 0
}

// TestLimiterAcrossASentinelFailover reserves against a token budget from
// several callers, each writing its call's usage row as the gateway does,
// while the master fails over and is SIGKILLed mid-burst. Calls fail
// closed (503) while no master answers. Reservations the old master
// acknowledged but had not replicated are lost with it, so the new
// master's counter may be low until the budget watch's next pass raises it
// to the usage in Postgres; from then on the budget holds. So at most the
// reservations granted between the failover and that pass are over the
// budget, whatever the replication lag was, and the test counts them.
func TestLimiterAcrossASentinelFailover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	var org, project string
	if err := db.Pool().QueryRow(ctx, `INSERT INTO organizations (key, name) VALUES ('acme', 'Acme') RETURNING id::text`).Scan(&org); err != nil {
		t.Fatal(err)
	}
	if err := db.Pool().QueryRow(ctx, `INSERT INTO projects (organization_id, key, name) VALUES ($1, 'ALPHA', 'Alpha') RETURNING id::text`, org).Scan(&project); err != nil {
		t.Fatal(err)
	}
	const amount, allowed, callers = 100, 300, 8
	lim := store.Limits{OrganizationID: org, ProjectID: project, TokenBudget: int64p(amount * allowed), BudgetPeriod: store.BudgetDay}
	if _, err := db.PutLimits(ctx, lim); err != nil {
		t.Fatal(err)
	}
	sn := redistest.StartSentinel(t)
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: redistest.MasterName, SentinelAddrs: sn.Addrs(),
		DialTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	frozen := time.Now()
	now := func() time.Time { return frozen }
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	l := &limiter{rdb: rdb, prefix: "gw:", now: now, log: log}
	sc := &scope{LLMScope: store.LLMScope{OrganizationID: org, OrganizationKey: "acme", ProjectID: project, ProjectKey: "ALPHA", Limits: lim}}
	w := makeBudgetWatch(db, rdb, "gw:", now, log)
	if err := w.refresh(ctx); err != nil { // the watch knows the first master
		t.Fatal(err)
	}
	key := budgetCounterKey("gw:", project, store.BudgetDay, store.BudgetTokens, frozen)
	start, end := budgetPeriod(frozen.UTC(), store.BudgetDay)
	settled := func() int64 {
		t.Helper()
		sum, err := db.SettledTokens(ctx, []store.BudgetSpan{{ScopeID: project, Start: start, End: end}})
		if err != nil {
			t.Fatal(err)
		}
		return sum[project]
	}

	// phase is 0 before the failover, 1 from it until the watch reconciled
	// on the new master, 2 after. A grant whose reservation began before 2
	// and whose usage row was written after 0 is in the window: it may be
	// missing from the old master's replicated counter and from the usage
	// the reconciliation read.
	var phase atomic.Int32
	var granted, window, unavailable, seq atomic.Int64
	// The callers hold after a third of the budget until the failover
	// starts, and after two thirds until the reconciliation: the burst
	// spans both.
	third, failing, reconciledAll := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var thirdOnce, failingOnce, reconciledOnce sync.Once
	failover := func() { failingOnce.Do(func() { close(failing) }) }
	passed := func() { reconciledOnce.Do(func() { close(reconciledAll) }) }
	var wg sync.WaitGroup
	deadline := time.Now().Add(2 * time.Minute)
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				began := phase.Load()
				res, ref := l.reserve(ctx, sc, "claude-test", amount, 0, false)
				switch {
				case ref == nil:
					u := store.Usage{RequestID: fmt.Sprintf("call-%d", seq.Add(1)), OrganizationID: org, ProjectID: project,
						Caller: "planner:test", Provider: store.ProviderAnthropic, Model: "claude-test", Status: http.StatusOK,
						InputTokens: 60, OutputTokens: 25, CacheReadTokens: 10, CacheWriteTokens: 5, CreatedAt: frozen}
					if err := l.settle(ctx, res, u.InputTokens+u.OutputTokens+u.CacheReadTokens+u.CacheWriteTokens, 0); err != nil {
						t.Errorf("settle: %v", err)
					}
					if _, err := db.InsertUsage(ctx, []store.Usage{u}); err != nil {
						t.Errorf("insert usage: %v", err)
						return
					}
					if began <= 1 && phase.Load() >= 1 {
						window.Add(1)
					}
					switch n := granted.Add(1); {
					case n >= 2*allowed/3:
						<-reconciledAll
					case n >= allowed/3:
						thirdOnce.Do(func() { close(third) })
						<-failing
					}
				case ref.status == http.StatusForbidden:
					return
				case ref.status == http.StatusServiceUnavailable: // no master answers: refused, the caller tries again
					unavailable.Add(1)
					<-time.After(10 * time.Millisecond)
				default:
					t.Errorf("reservation refused with %d %s, want 503 while no master answers", ref.status, ref.msg)
					return
				}
			}
			t.Errorf("the budget was never spent within two minutes")
		}()
	}
	t.Cleanup(wg.Wait) // no caller outlives the test, even when it fails
	t.Cleanup(func() { failover(); passed() })
	select {
	case <-third:
	case <-time.After(time.Minute):
		t.Fatalf("%d reservations granted within a minute, want %d before the failover", granted.Load(), allowed/3)
	}
	phase.Store(1)
	failover()
	sn.Failover(t)
	var before int64
	storetest.WaitFor(t, "the budget watch to reconcile on the new master", func() bool {
		before = settled()
		return w.refresh(ctx) == nil && reconciled(t, w, reconcileMaster) == 2
	})
	if used, err := rdb.Get(ctx, key).Int64(); err != nil || used < before {
		t.Fatalf("budget counter after the reconciliation = %d (%v); want at least the %d tokens settled before it", used, err, before)
	}
	phase.Store(2)
	passed()
	wg.Wait()
	n, win := granted.Load(), window.Load()
	t.Logf("%d reservations granted, %d of them between the failover and the reconciliation; %d refused while no master answered",
		n, win, unavailable.Load())
	if n > allowed+win || n < allowed-callers {
		t.Fatalf("%d reservations of %d tokens granted against a budget of %d; want at most %d plus the %d granted between the failover and the reconciliation",
			n, amount, amount*allowed, allowed, win)
	}
	if got := settled(); got != amount*n {
		t.Fatalf("usage settled %d tokens, want %d for %d calls", got, amount*n, n)
	}
	used, err := rdb.Get(ctx, key).Int64()
	if err != nil || used < amount*allowed || used < amount*(n-win) {
		t.Fatalf("budget counter on the new master = %d (%v); want the budget %d spent, and at least the %d tokens of the calls outside the window",
			used, err, amount*allowed, amount*(n-win))
	}
	// The per-minute limits run on the new master as before.
	rpm := store.Limits{RequestsPerMinute: int64p(5), BudgetPeriod: store.BudgetDay}
	for i := range 6 {
		_, err := l.take(ctx, "scope-b", "project B", rpm, charge{tokens: amount})
		if want := i == 5; (limitStatus(err) == http.StatusTooManyRequests) != want || (err != nil) != want {
			t.Fatalf("request %d of 5 per minute on the new master: %v", i+1, err)
		}
	}
	// With no master left at all, a limited call is refused, not let through.
	sn.Master.Kill()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, ref := l.reserve(cctx, sc, "claude-test", amount, 0, false); ref == nil || ref.status != http.StatusServiceUnavailable {
		t.Fatalf("reservation with no master: %+v, want 503", ref)
	}
}

// TestLimiterOnRedisCluster runs the limits of many scopes, spread over a
// three-master cluster's slots: a reservation's keys share the scope's hash
// slot, so each script runs on one node, and every limit holds.
func TestLimiterOnRedisCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { _ = rdb.Close() })
	frozen := time.Now()
	l := &limiter{rdb: rdb, prefix: "gw:", now: func() time.Time { return frozen }}
	ctx := context.Background()
	lim := store.Limits{RequestsPerMinute: int64p(4), TokensPerMinute: int64p(10000), TokenBudget: int64p(300),
		BudgetPeriod: store.BudgetWeek}
	nodes := map[string]bool{}
	for i := range 24 {
		scope := fmt.Sprintf("scope-%d", i)
		var got []int
		for range 5 {
			r, err := l.take(ctx, scope, scope, lim, charge{tokens: 100})
			got = append(got, limitStatus(err))
			if err != nil && limitStatus(err) == 0 {
				t.Fatalf("%s: reserve: %v", scope, err)
			}
			if err == nil {
				// Each call used half its reservation: the budget admits more.
				if err := l.settle(ctx, r, 50, 0); err != nil {
					t.Fatalf("%s: settle: %v", scope, err)
				}
			}
		}
		// 4 requests a minute; the budget (300, 50 used each) never refuses.
		if want := []int{0, 0, 0, 0, http.StatusTooManyRequests}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: refusals %v, want %v", scope, got, want)
		}
		var slot int64 = -1
		for _, key := range scopeKeys(l, scope, frozen) {
			s, err := rdb.ClusterKeySlot(ctx, key).Result()
			if err != nil || (slot >= 0 && s != slot) {
				t.Fatalf("%s: key %s in slot %d (%v), the scope's other keys in %d", scope, key, s, err, slot)
			}
			slot = s
		}
		used, err := rdb.Get(ctx, scopeKeys(l, scope, frozen)[2]).Int64()
		if err != nil || used != 4*50 {
			t.Fatalf("%s: budget counter %d (%v), want %d", scope, used, err, 4*50)
		}
		n, err := rdb.MasterForKey(ctx, scopeKeys(l, scope, frozen)[0])
		if err != nil {
			t.Fatal(err)
		}
		nodes[n.Options().Addr] = true
	}
	if len(nodes) != 3 {
		t.Fatalf("24 scopes' keys on %d nodes, want all 3", len(nodes))
	}
	// The budget refuses once spent, on whichever node holds the scope.
	spent := store.Limits{TokenBudget: int64p(250), BudgetPeriod: store.BudgetMonth}
	for i := range 4 {
		_, err := l.take(ctx, "scope-budget", "project B", spent, charge{tokens: 100})
		if want := i == 3; (limitStatus(err) == http.StatusForbidden) != want || (err != nil) != want {
			t.Fatalf("reservation %d of 100 against 250: %v", i+1, err)
		}
	}
}

// scopeKeys are the rpm, tpm and week budget counters of a scope at now, as
// reserve names them.
func scopeKeys(l *limiter, scope string, now time.Time) []string {
	now = now.UTC()
	minute := now.Truncate(time.Minute).Format("200601021504")
	start, _ := budgetPeriod(now, store.BudgetWeek)
	base := l.prefix + "{" + scope + "}:"
	return []string{base + "rpm:" + minute, base + "tpm:" + minute, base + "budget:week:" + start.Format("20060102")}
}
