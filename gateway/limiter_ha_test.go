package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/balletplanner/ballet/internal/redistest"
	"github.com/balletplanner/ballet/store"
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
// several callers while the master fails over and is SIGKILLed: calls fail
// closed while no master answers, resume on the new master, and the budget
// is spent within its bound: one reservation over, plus at most one in
// flight per caller at the failover (lost, or counted without an answer).
func TestLimiterAcrossASentinelFailover(t *testing.T) {
	t.Parallel()
	sn := redistest.StartSentinel(t)
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: redistest.MasterName, SentinelAddrs: sn.Addrs(),
		DialTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	frozen := time.Now()
	l := &limiter{rdb: rdb, prefix: "gw:", now: func() time.Time { return frozen }}
	const amount, allowed, callers = 100, 300, 8
	lim := store.Limits{TokenBudget: int64p(amount * allowed), BudgetPeriod: store.BudgetDay}
	ctx := context.Background()

	var granted, failed atomic.Int64
	halfway := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	deadline := time.Now().Add(time.Minute)
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				r, err := l.reserve(ctx, "scope-a", "project A", lim, amount)
				switch {
				case err == nil:
					if granted.Add(1) == allowed/3 {
						once.Do(func() { close(halfway) })
					}
					if err := l.settle(ctx, r, amount); err != nil {
						t.Errorf("settle: %v", err)
					}
				case limitStatus(err) == http.StatusForbidden:
					return
				default: // no master answers: the call is refused (503), the caller tries again
					failed.Add(1)
					<-time.After(10 * time.Millisecond)
				}
			}
			t.Errorf("the budget was never spent within a minute")
		}()
	}
	t.Cleanup(wg.Wait) // no caller outlives the test, even when it fails
	select {
	case <-halfway:
	case <-time.After(time.Minute):
		t.Fatalf("%d reservations granted within a minute, want %d before the failover", granted.Load(), allowed/3)
	}
	sn.Failover(t)
	wg.Wait()
	n := granted.Load()
	t.Logf("%d reservations granted, %d refused while no master answered", n, failed.Load())
	if n < allowed-callers || n > allowed+1+callers {
		t.Fatalf("%d reservations of %d tokens granted against a budget of %d; want %d within one plus %d in flight",
			n, amount, amount*allowed, allowed, callers)
	}
	used, err := rdb.Get(ctx, "gw:{scope-a}:budget:day:"+frozen.UTC().Format("20060102")).Int64()
	if err != nil || used < amount*(allowed) || used > amount*(allowed+1+callers) {
		t.Fatalf("budget counter on the new master = %d (%v); want %d to %d", used, err, amount*allowed, amount*(allowed+1+callers))
	}
	// The per-minute limits run on the new master as before.
	rpm := store.Limits{RequestsPerMinute: int64p(5), BudgetPeriod: store.BudgetDay}
	for i := range 6 {
		_, err := l.reserve(ctx, "scope-b", "project B", rpm, amount)
		if want := i == 5; (limitStatus(err) == http.StatusTooManyRequests) != want || (err != nil) != want {
			t.Fatalf("request %d of 5 per minute on the new master: %v", i+1, err)
		}
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
			r, err := l.reserve(ctx, scope, scope, lim, 100)
			got = append(got, limitStatus(err))
			if err != nil && limitStatus(err) == 0 {
				t.Fatalf("%s: reserve: %v", scope, err)
			}
			if err == nil {
				// Each call used half its reservation: the budget admits more.
				if err := l.settle(ctx, r, 50); err != nil {
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
		_, err := l.reserve(ctx, "scope-budget", "project B", spent, 100)
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
