package gateway

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/balletplanner/ballet/store"
)

// Redis replicates asynchronously: reservations a master acknowledged but
// had not yet replicated when it failed are lost with it, and a Redis
// restarted without persistence has no counters at all. The usage rows in
// Postgres are the truth of what was spent, so the budget watch raises the
// counters to them: every counter after a change of master (and at the
// first pass, when the master is not yet known), and a counter that is
// missing while its period has usage. A counter is never lowered: it also
// holds the reservations of calls still running, which have no usage row
// yet.

// The reason label values of ballet_llm_budget_reconciles_total.
const (
	reconcileMaster  = "master"  // the first pass, or a new Redis master
	reconcileMissing = "missing" // counter keys missing on the same master
)

func newReconcilesCounter() *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ballet_llm_budget_reconciles_total",
		Help: "Reconciliations of the token budget counters in Redis with the usage settled in Postgres, by reason: " +
			"master (the gateway's first pass, or a new Redis master after a failover or restart: every counter checked), " +
			"missing (counter keys lost on the same master, counted when one was seeded). A counter is only ever raised.",
	}, []string{"reason"})
	c.WithLabelValues(reconcileMaster) // the series start at 0
	c.WithLabelValues(reconcileMissing)
	return c
}

// raiseScript raises a budget counter to at least ARGV[1], with the TTL
// the limiter gives it (ARGV[2] ms), and returns its value; a counter
// already as high is left alone.
var raiseScript = redis.NewScript(`
local floor = tonumber(ARGV[1])
local used = tonumber(redis.call('GET', KEYS[1]) or '-1')
if used < floor then
  redis.call('SET', KEYS[1], floor, 'PX', ARGV[2])
  return floor
end
return used
`)

// redisMaster names the Redis master the client writes to by its run_id,
// which changes with a failover and with a restart: on a cluster, the
// run_ids of all masters.
func redisMaster(ctx context.Context, rdb redis.UniversalClient) (string, error) {
	if c, ok := rdb.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		var ids []string
		err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			id, err := runID(ctx, m)
			mu.Lock()
			ids = append(ids, id)
			mu.Unlock()
			return err
		})
		if err != nil {
			return "", err
		}
		slices.Sort(ids)
		return strings.Join(ids, ","), nil
	}
	return runID(ctx, rdb)
}

// runID reads the run_id of INFO server.
func runID(ctx context.Context, c redis.Cmdable) (string, error) {
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "", fmt.Errorf("budget watch: read the Redis run_id: %w", err)
	}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if id, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "run_id:"); ok && id != "" {
			return id, nil
		}
	}
	return "", fmt.Errorf("budget watch: read the Redis run_id: none in INFO server")
}

// reconcile raises the counters of the scopes that need it to their
// period's usage in Postgres, and updates used (read from Redis this
// pass) with what it set: all of them when master is not the master last
// reconciled with, else those whose key is missing (found false), except
// the keys found missing before with no usage. The master is remembered
// only once its counters are all raised, so that a failed pass is retried.
func (w *budgetWatch) reconcile(ctx context.Context, scopes []store.BudgetScope, now time.Time, master string, used []int64, found []bool) error {
	all := master != w.master
	keys := make([]string, len(scopes))
	var todo []int
	empty := map[string]bool{}
	for i, s := range scopes {
		keys[i] = budgetCounterKey(w.prefix, s.ScopeID, s.Period, s.Unit, now)
		switch {
		case all:
			todo = append(todo, i)
		case found[i]:
		case w.emptySeen[keys[i]]:
			empty[keys[i]] = true // still missing, still nothing to seed it with
		default:
			todo = append(todo, i)
		}
	}
	if len(todo) == 0 {
		w.emptySeen = empty
		return nil
	}
	spans := make([]store.BudgetSpan, len(todo))
	for j, i := range todo {
		s := scopes[i]
		start, end := budgetPeriod(now, s.Period)
		spans[j] = store.BudgetSpan{ScopeID: s.ScopeID, Organization: s.Organization, Start: start, End: end,
			Money: s.Unit == store.BudgetMicroUSD}
	}
	floors, err := w.src.SettledTokens(ctx, spans)
	if err != nil {
		return fmt.Errorf("budget watch: reconcile counters: %w", err)
	}
	var raise []int
	for _, i := range todo {
		switch floor := floors[scopes[i].ScopeID]; {
		case floor > used[i] || (floor > 0 && !found[i]):
			raise = append(raise, i)
		case !found[i]:
			empty[keys[i]] = true
		}
	}
	raised := 0
	for from := 0; from < len(raise); from += budgetBatch {
		part := raise[from:min(from+budgetBatch, len(raise))]
		cmds := make([]*redis.Cmd, len(part))
		// EVAL, not EVALSHA: a master just promoted has no scripts cached.
		_, err := w.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for j, i := range part {
				s := scopes[i]
				cmds[j] = raiseScript.Eval(ctx, p, []string{keys[i]}, floors[s.ScopeID],
					budgetCounterTTL(now, s.Period).Milliseconds())
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("budget watch: raise budget counters: %w", err)
		}
		for j, i := range part {
			n, err := cmds[j].Int64()
			if err != nil {
				return fmt.Errorf("budget watch: raise budget counter: %w", err)
			}
			if n > used[i] || !found[i] {
				raised++
			}
			used[i] = n
		}
	}
	w.emptySeen = empty
	reason := reconcileMissing
	if all {
		reason = reconcileMaster
		w.master = master
	} else if raised == 0 {
		return nil // new periods' keys not used yet: nothing was lost
	}
	w.reconciles.WithLabelValues(reason).Inc()
	w.log.InfoContext(ctx, "budget counters reconciled with the usage in Postgres", slog.String("reason", reason),
		slog.Int("scopes", len(todo)), slog.Int("raised", raised))
	return nil
}
