package benchfair

import (
	"context"
	"fmt"
	"io"
	"time"
)

// Validate refuses options that cannot run.
func (o Options) Validate() error {
	switch {
	case o.Concurrency < 1 || o.CostConcurency < 1:
		return fmt.Errorf("--concurrency and --cost-concurrency: must be at least 1")
	case o.Latency < 0:
		return fmt.Errorf("--latency: must not be negative")
	case o.QuietEvery <= 0:
		return fmt.Errorf("--quiet-every: must be positive")
	case o.QuietAlone < 0 || o.OtherOver < 0:
		return fmt.Errorf("--quiet-alone and --other-over: must not be negative")
	case o.NoisyProjects < 1 || o.NoisySessions < 1 || o.BurstB < 1:
		return fmt.Errorf("--noisy-projects, --noisy-sessions and --burst-b: must be at least 1")
	case o.Cap < 1:
		return fmt.Errorf("--cap: must be at least 1")
	case o.FloodTotal < 1 || o.FloodProject < 1 || o.FloodOrg < 0 || o.FloodProjects < 1 || o.OtherSends < 0:
		return fmt.Errorf("--flood-*: totals and projects must be at least 1")
	case o.CostSessions < 1 || o.CostMessages < 1:
		return fmt.Errorf("--cost-sessions and --cost-messages: must be at least 1")
	}
	return nil
}

// Run runs every scenario and prints the table.
func Run(ctx context.Context, d Deps, o Options, out io.Writer) error {
	if err := o.Validate(); err != nil {
		return err
	}
	fmt.Fprintf(out, "bench fairness: worker concurrency %d, fake model latency %s; QUIET sends every %s (a new session each), %s alone; NOISY bursts %d projects × %d sessions = %d turns; scenario B bursts %d + %d; cap %d; cost %d sessions × %d messages at concurrency %d, latency 0\n",
		o.Concurrency, o.Latency, o.QuietEvery, o.QuietAlone, o.NoisyProjects, o.NoisySessions, o.NoisyProjects*o.NoisySessions,
		o.BurstB, o.BurstB, o.Cap, o.CostSessions, o.CostMessages, o.CostConcurency)
	fmt.Fprintln(out, "database: a fresh one per scenario and mode (migrated, dropped at the end); Redis: a namespace of its own each")
	step := func(name string) func() {
		start := time.Now()
		fmt.Fprintf(out, "… %s", name)
		return func() { fmt.Fprintf(out, " (%.1f s)\n", time.Since(start).Seconds()) }
	}
	done := step("scenario A, fair")
	fair, err := scenarioA(ctx, d, o, "fair")
	if err != nil {
		return fmt.Errorf("scenario A (fair): %w", err)
	}
	done()
	done = step("scenario A, fifo")
	fifo, err := scenarioA(ctx, d, o, "fifo")
	if err != nil {
		return fmt.Errorf("scenario A (fifo): %w", err)
	}
	done()
	done = step("scenario B, weights 1 and 3")
	b, err := scenarioB(ctx, d, o, 0)
	if err != nil {
		return fmt.Errorf("scenario B: %w", err)
	}
	done()
	done = step(fmt.Sprintf("scenario B with max_running_turns = %d on the weight-3 organization", o.Cap))
	c, err := scenarioB(ctx, d, o, o.Cap)
	if err != nil {
		return fmt.Errorf("scenario B (cap): %w", err)
	}
	done()
	done = step("admission, the flood")
	fl, err := scenarioFlood(ctx, d, o)
	if err != nil {
		return fmt.Errorf("admission: %w", err)
	}
	done()
	done = step("dispatcher cost, fair")
	costFair, err := scenarioCost(ctx, d, o, "fair")
	if err != nil {
		return fmt.Errorf("cost (fair): %w", err)
	}
	done()
	done = step("dispatcher cost, fifo")
	costFIFO, err := scenarioCost(ctx, d, o, "fifo")
	if err != nil {
		return fmt.Errorf("cost (fifo): %w", err)
	}
	done()
	printTable(out, o, fair, fifo, b, c, fl, costFair, costFIFO)
	return nil
}

func msf(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	switch {
	case v < 10:
		return fmt.Sprintf("%.2f ms", v)
	case v < 100:
		return fmt.Sprintf("%.1f ms", v)
	}
	return fmt.Sprintf("%.0f ms", v)
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}

func printTable(out io.Writer, o Options, fair, fifo resultA, b, c resultB, fl resultFlood, cf, cq Cost) {
	fmt.Fprint(out, "\n| scenario | figure | fair | fifo | goal | |\n|---|---|---:|---:|---|---|\n")
	row := func(sc, fig, f, q, goal, v string) {
		fmt.Fprintf(out, "| %s | %s | %s | %s | %s | %s |\n", sc, fig, f, q, goal, v)
	}
	row("A", "QUIET turns alone / during the burst", fmt.Sprintf("%d / %d", fair.aloneN, fair.burstN), fmt.Sprintf("%d / %d", fifo.aloneN, fifo.burstN), "", "")
	row("A", "QUIET queue wait alone p50", msf(fair.aloneP50), msf(fifo.aloneP50), "", "")
	row("A", "QUIET queue wait alone p99", msf(fair.aloneP99), msf(fifo.aloneP99), "", "")
	row("A", "QUIET queue wait during the burst p50", msf(fair.burstP50), msf(fifo.burstP50), "", "")
	row("A", "QUIET queue wait during the burst p99", msf(fair.burstP99), msf(fifo.burstP99), "≤ 1 s (fair)", verdict(fair.burstN > 0 && fair.burstP99 <= time.Second))
	row("A", "burst: turns finished / seconds", fmt.Sprintf("%d / %.1f s", fair.burstTurns, fair.burstTook.Seconds()), fmt.Sprintf("%d / %.1f s", fifo.burstTurns, fifo.burstTook.Seconds()), "", "")
	ratio := fair.turnsPerSec / max(fifo.turnsPerSec, 1e-9)
	row("A", "burst: turns/s", fmt.Sprintf("%.2f", fair.turnsPerSec), fmt.Sprintf("%.2f", fifo.turnsPerSec), "", "")
	row("A", "burst: turns/s fair ÷ fifo", fmt.Sprintf("%.3f", ratio), "", "≥ 0.95", verdict(ratio >= 0.95))
	row("A", "burst: slot share QUIET / NOISY", fmt.Sprintf("%.1f%% / %.1f%%", 100*fair.quietShare, 100*fair.noisyShare), fmt.Sprintf("%.1f%% / %.1f%%", 100*fifo.quietShare, 100*fifo.noisyShare), "", "")
	row("B", fmt.Sprintf("weights 1 / 3, bursts of %d each: share of running turns while both backlogged", o.BurstB),
		fmt.Sprintf("%.1f%% / %.1f%%", 100*b.share1, 100*b.share3), "", "25% / 75% ± 5%", verdict(b.backlogged > 0 && b.share3 >= 0.70 && b.share3 <= 0.80))
	row("B", "samples (100 ms) while both backlogged / in all; drained in", fmt.Sprintf("%d / %d; %.1f s", b.backlogged, b.samples, b.took.Seconds()), "", "", "")
	row("caps", fmt.Sprintf("max running turns of the weight-3 organization (max_running_turns = %d)", c.cap),
		fmt.Sprintf("%d", c.max3), "", fmt.Sprintf("≤ %d", c.cap), verdict(c.samples > 0 && c.max3 <= c.cap))
	row("caps", "samples (100 ms) / drained in; shares while both backlogged", fmt.Sprintf("%d / %.1f s; %.1f%% / %.1f%%", c.samples, c.took.Seconds(), 100*c.share1, 100*c.share3), "", "", "")
	row("admission", fmt.Sprintf("FLOOD (%d projects) accepted / refused (total %d, per project %d, per organization %d)",
		o.FloodProjects, fl.lim.Total, fl.lim.PerProject, fl.lim.PerOrganization), fmt.Sprintf("%d / %d", fl.floodSent, fl.floodRefused), "", "", "")
	row("admission", fmt.Sprintf("OTHER's %d sends over %s: refused", o.OtherSends, o.OtherOver), fmt.Sprintf("%d", fl.otherRefused), "", "0", verdict(fl.otherRefused == 0))
	cfv, cqv := cf.perTurn(), cq.perTurn()
	pg := func(c Cost, v float64) string {
		if !c.PGCPUOK {
			return "n/a"
		}
		return fmt.Sprintf("%.3f ms", v)
	}
	row("cost", "turns, turns/s", fmt.Sprintf("%d, %.0f", cf.Turns, cfv[0]), fmt.Sprintf("%d, %.0f", cq.Turns, cqv[0]), "", "")
	row("cost", "Go CPU per turn", fmt.Sprintf("%.3f ms", cfv[1]), fmt.Sprintf("%.3f ms", cqv[1]), "", "")
	row("cost", "Postgres CPU per turn", pg(cf, cfv[2]), pg(cq, cqv[2]), "", "")
	row("cost", "Redis CPU per turn", fmt.Sprintf("%.3f ms", cfv[3]), fmt.Sprintf("%.3f ms", cqv[3]), "", "")
	row("cost", "CPU per turn, total", fmt.Sprintf("%.3f ms", cfv[4]), fmt.Sprintf("%.3f ms", cqv[4]), "", "")
	row("cost", "statements per turn", fmt.Sprintf("%.1f", cfv[5]), fmt.Sprintf("%.1f", cqv[5]), "", "")
	row("cost", "Redis commands per turn", fmt.Sprintf("%.1f", cfv[6]), fmt.Sprintf("%.1f", cqv[6]), "", "")
	diff := cfv[4] - cqv[4]
	row("cost", "dispatcher: CPU per turn fair − fifo", fmt.Sprintf("%+.3f ms", diff), "", "≤ 0.3 ms", verdict(diff <= 0.3))
	row("cost", "dispatcher: statements / Redis commands per turn fair − fifo", fmt.Sprintf("%+.1f / %+.1f", cfv[5]-cqv[5], cfv[6]-cqv[6]), "", "", "")
	fmt.Fprint(out, "\nQueue wait: planner_turns.started_at − created_at, from Postgres at the end; \"during the burst\" are QUIET's turns created between NOISY's first turn and NOISY's last turn's end. "+
		"Turns/s: the turns (of both organizations) finished in that window, divided by it. Slot share (A): each organization's running time integrated over the window (started_at..finished_at). "+
		"Shares (B) and caps: running turns per organization sampled from Postgres every 100 ms; B's shares only over the samples where both organizations had ready, undispatched turns. "+
		"Admission: no worker runs, so nothing drains. "+
		"Cost: Go CPU of this process (worker, load generator, pub/sub reader), the bench database's backends, the whole Redis server; statements from pg_stat_statements when loaded, else the driver.\n")
}

// perTurn is turns/s, Go, Postgres, Redis and total CPU ms per turn,
// statements and Redis commands per turn.
func (c Cost) perTurn() []float64 {
	n := float64(max(c.Turns, 1))
	perMS := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / n }
	pg := c.PGCPU
	if !c.PGCPUOK {
		pg = 0
	}
	return []float64{float64(c.Turns) / max(c.Took.Seconds(), 1e-9), perMS(c.GoCPU), perMS(pg), perMS(c.RedisCPU),
		perMS(c.GoCPU + pg + c.RedisCPU), float64(c.Statements) / n, float64(c.RedisCmds) / n}
}
