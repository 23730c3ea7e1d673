package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/balletplanner/ballet/internal/cputime"
	"github.com/balletplanner/ballet/internal/promread"
)

// turnCost is what one mode's turns cost, from the samples around them.
type turnCost struct {
	turns      int
	took       time.Duration
	goCPU      time.Duration
	modelCPU   time.Duration // the fake model's process, not in the total
	pgCPU      time.Duration // the bench database's backends
	pgDispatch time.Duration // of which the dispatcher's own connections'
	// dispatchGo is the Go CPU of the dispatcher's goroutines, and
	// dispatchEnqueue the part of it spent enqueueing tasks.
	dispatchGo, dispatchEnqueue time.Duration
	pgCPUOK                     bool
	pgBackends                  [2]int // at the start, at the end
	pgTLS                       int    // of the backends at the end, those on TLS
	pgServerCPU                 time.Duration
	redisCPU                    time.Duration
	driver                      pgCounts
	pgssCalls                   int64 // -1 without pg_stat_statements
	commits                     int64
	dbBytes                     int64
	walBytes                    int64
	redisCmds                   map[string]int64
}

// costMeter samples the costs of the bench process, the bench database and
// Redis before and after a mode's turns.
type costMeter struct {
	bd      *benchDatabase
	rdb     redis.UniversalClient
	pool    *pgxpool.Pool
	counter *pgCounter
	model   *fakeProcess
	pids    []int32 // the backends at the end
	// reg, when set, has the dispatcher's CPU counter.
	reg prometheus.Gatherer

	start     time.Time
	goCPU     time.Duration
	modelCPU  time.Duration
	pg        pgSample
	commits   int64
	redisCPU  time.Duration
	redisCmds map[string]int64
	driver    pgCounts
	dispatch  [2]time.Duration // the dispatcher's Go CPU: all of it, enqueueing
	cost      turnCost
}

// begin closes the pool's connections, so that their backends flush their
// statistics, and samples everything. The dispatcher's connections are
// outside the pool and stay: their backends are sampled, not waited for.
func (m *costMeter) begin(ctx context.Context) error {
	pids, err := m.bd.poolBackendPIDs(ctx)
	if err != nil {
		return err
	}
	m.pool.Reset()
	if m.commits, err = m.bd.commitsAfterExit(ctx, pids); err != nil {
		return err
	}
	if m.pg, err = m.bd.samplePG(ctx); err != nil {
		return err
	}
	if m.redisCPU, m.redisCmds, err = sampleRedis(ctx, m.rdb); err != nil {
		return err
	}
	m.driver = m.counter.counts()
	if m.dispatch, err = dispatcherCPU(m.reg); err != nil {
		return err
	}
	m.goCPU, m.modelCPU = cputime.Process(), m.model.cpu()
	m.start = time.Now()
	return nil
}

// stop samples everything but the commits, right after the last turn.
func (m *costMeter) stop(ctx context.Context, turns int) error {
	c := &m.cost
	c.turns, c.took = turns, time.Since(m.start)
	c.goCPU, c.modelCPU = cputime.Process()-m.goCPU, m.model.cpu()-m.modelCPU
	dc, err := dispatcherCPU(m.reg)
	if err != nil {
		return err
	}
	c.dispatchGo, c.dispatchEnqueue = dc[0]-m.dispatch[0], dc[1]-m.dispatch[1]
	d := m.counter.counts()
	c.driver = pgCounts{d.statements - m.driver.statements, d.roundTrips - m.driver.roundTrips,
		d.commits - m.driver.commits, d.connects - m.driver.connects}
	cpu, cmds, err := sampleRedis(ctx, m.rdb)
	if err != nil {
		return err
	}
	c.redisCPU = cpu - m.redisCPU
	c.redisCmds = map[string]int64{}
	for k, v := range cmds {
		if n := v - m.redisCmds[k]; n > 0 {
			c.redisCmds[k] = n
		}
	}
	pg, err := m.bd.samplePG(ctx)
	if err != nil {
		return err
	}
	for pid := range pg.backends {
		m.pids = append(m.pids, int32(pid))
	}
	c.pgCPUOK = pg.cpuReadable && m.pg.cpuReadable
	for pid, t := range pg.backends {
		c.pgCPU += t - m.pg.backends[pid]
		if pg.dispatchers[pid] {
			c.pgDispatch += t - m.pg.backends[pid]
		}
	}
	c.pgBackends = [2]int{len(m.pg.backends), len(pg.backends)}
	if c.pgTLS, err = m.bd.tlsBackends(ctx); err != nil {
		return err
	}
	if pg.server > 0 && m.pg.server > 0 {
		c.pgServerCPU = pg.server - m.pg.server
	}
	c.dbBytes = pg.size - m.pg.size
	c.walBytes = pg.walLSN - m.pg.walLSN
	c.pgssCalls = -1
	if m.bd.pgss {
		c.pgssCalls = pg.statements - m.pg.statements
	}
	return nil
}

// finish reads the commits once the pool is closed and its backends have
// flushed their statistics.
func (m *costMeter) finish(ctx context.Context) (turnCost, error) {
	n, err := m.bd.commitsAfterExit(ctx, m.pids)
	if err != nil {
		return m.cost, err
	}
	m.cost.commits = n - m.commits
	return m.cost, nil
}

// dispatcherCPU reads ballet_planner_dispatcher_cpu_seconds_total from
// reg: its sum over the work labels, and its enqueue part; zero without a
// registry.
func dispatcherCPU(reg prometheus.Gatherer) ([2]time.Duration, error) {
	var out [2]time.Duration
	if reg == nil {
		return out, nil
	}
	for i, labels := range [][]string{nil, {"work", "enqueue"}} {
		v, _, err := promread.Counter(reg, "ballet_planner_dispatcher_cpu_seconds_total", labels...)
		if err != nil {
			return out, fmt.Errorf("bench: %w", err)
		}
		out[i] = time.Duration(v * float64(time.Second))
	}
	return out, nil
}

// sampleRedis reads used_cpu_sys + used_cpu_user and the calls of each
// command from INFO: the whole server's, exact without /proc access.
func sampleRedis(ctx context.Context, rdb redis.UniversalClient) (time.Duration, map[string]int64, error) {
	var cpu time.Duration
	cmds := map[string]int64{}
	add := func(c redis.UniversalClient) error {
		info, err := c.Info(ctx, "cpu", "commandstats").Result()
		if err != nil {
			return fmt.Errorf("bench turns: redis INFO: %w", err)
		}
		for line := range strings.SplitSeq(info, "\n") {
			line = strings.TrimSpace(line)
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			switch {
			case k == "used_cpu_sys" || k == "used_cpu_user":
				f, _ := strconv.ParseFloat(v, 64)
				cpu += time.Duration(f * float64(time.Second))
			case strings.HasPrefix(k, "cmdstat_"):
				calls, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
				n, _ := strconv.ParseInt(calls, 10, 64)
				cmds[strings.TrimPrefix(k, "cmdstat_")] += n
			}
		}
		return nil
	}
	var err error
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error { return add(c) })
	} else {
		err = add(rdb)
	}
	return cpu, cmds, err
}

// costColumns are the per-turn figures of one mode, in table order.
func (c turnCost) columns() []float64 {
	n := float64(max(c.turns, 1))
	perMS := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / n }
	var cmds int64
	for _, v := range c.redisCmds {
		cmds += v
	}
	stmts := c.driver.statements
	if c.pgssCalls >= 0 {
		stmts = c.pgssCalls
	}
	return []float64{float64(c.turns) / c.took.Seconds(), perMS(c.goCPU), perMS(c.pgCPU), perMS(c.redisCPU),
		perMS(c.goCPU + c.pgCPU + c.redisCPU), float64(stmts) / n, float64(c.driver.roundTrips) / n,
		float64(c.commits) / n, float64(c.walBytes) / n, float64(cmds) / n, perMS(c.modelCPU)}
}

// printCostTable prints the per-turn cost of each mode and their ratio.
func printCostTable(out io.Writer, costs map[string]turnCost, pgss bool) {
	stmtSrc := "driver"
	if pgss {
		stmtSrc = "pg_stat_statements"
	}
	fmt.Fprintf(out, "\n### Per-turn cost\n\n| mode | turns/s | Go CPU ms/turn | Postgres CPU ms/turn | Redis CPU ms/turn | total | statements/turn (%s) | round trips/turn | commits/turn | WAL bytes/turn | Redis cmds/turn | fake model CPU ms/turn (not in total) |\n"+
		"|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n", stmtSrc)
	cols := map[string][]float64{}
	for _, mode := range []string{"queue", "direct"} {
		c, ok := costs[mode]
		if !ok {
			continue
		}
		v := c.columns()
		cols[mode] = v
		pg := fmt.Sprintf("%.2f", v[2])
		if !c.pgCPUOK {
			pg = "n/a (no access)"
		}
		fmt.Fprintf(out, "| %s | %.0f | %.2f | %s | %.2f | %.2f | %.1f | %.1f | %.2f | %.0f | %.1f | %.2f |\n",
			mode, v[0], v[1], pg, v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10])
	}
	if q, d := cols["queue"], cols["direct"]; q != nil && d != nil {
		fmt.Fprint(out, "| queue ÷ direct |")
		for i := range q {
			if d[i] == 0 {
				fmt.Fprint(out, " – |")
				continue
			}
			fmt.Fprintf(out, " %.2f |", q[i]/d[i])
		}
		fmt.Fprintln(out)
	}
	for _, mode := range []string{"queue", "direct"} {
		c, ok := costs[mode]
		if !ok {
			continue
		}
		n := float64(max(c.turns, 1))
		fmt.Fprintf(out, "\n%s: %d turns in %.2f s. Database growth %.0f bytes/turn (pg_database_size). Driver: %.1f statements, %.1f round trips, %.2f commits per turn, %d new connections.\n",
			mode, c.turns, c.took.Seconds(), float64(c.dbBytes)/n, float64(c.driver.statements)/n,
			float64(c.driver.roundTrips)/n, float64(c.driver.commits)/n, c.driver.connects)
		fmt.Fprintf(out, "  Postgres: backends of the bench database %d at the start, %d at the end (%d of them on TLS); whole server (postmaster, all backends, WAL writer, checkpointer, autovacuum, other databases) %.2f ms/turn.\n",
			c.pgBackends[0], c.pgBackends[1], c.pgTLS, float64(c.pgServerCPU)/float64(time.Millisecond)/n)
		fmt.Fprintf(out, "  Redis commands/turn, top 5: %s\n", topCommands(c.redisCmds, n, 5))
	}
	fmt.Fprint(out, "\nGo CPU: this process (getrusage): worker, load generator, pub/sub reader. "+
		"Fake model CPU: the ballet fake-llm child process (its threads' run time, /proc/<pid>/task/*/schedstat); the model is not Ballet's, so it is not in the total. "+
		"Postgres CPU: /proc/<pid>/stat of the bench database's backends alive at the end (a backend that exited during the run is missed). "+
		"Redis CPU and commands: INFO cpu and commandstats of the whole server. "+
		"WAL bytes: pg_current_wal_lsn() of the whole server. "+
		"Round trips: from the driver (a batch is one). Commits: pg_stat_database.xact_commit, read-only transactions included.\n")
}

func topCommands(cmds map[string]int64, turns float64, n int) string {
	names := make([]string, 0, len(cmds))
	for k := range cmds {
		names = append(names, k)
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Or(cmp.Compare(cmds[b], cmds[a]), cmp.Compare(a, b)) })
	var parts []string
	for _, k := range names[:min(n, len(names))] {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, float64(cmds[k])/turns))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
