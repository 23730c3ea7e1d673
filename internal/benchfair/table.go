package benchfair

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// costRounds are the metered runs of the cost scenario, per mode in the
// order they ran.
type costRounds struct{ fair, fifo []Cost }

func (c *costRounds) add(mode string, cost Cost) {
	if mode == "fair" {
		c.fair = append(c.fair, cost)
	} else {
		c.fifo = append(c.fifo, cost)
	}
}

// median is column col of perTurn's, the median over runs.
func median(runs []Cost, col int) float64 {
	v := make([]float64, 0, len(runs))
	for _, c := range runs {
		v = append(v, c.perTurn()[col])
	}
	return medianOf(v)
}

func medianOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// diffs are fair − fifo of column col, round by round.
func (c *costRounds) diffs(col int) []float64 {
	var d []float64
	for i := range min(len(c.fair), len(c.fifo)) {
		d = append(d, c.fair[i].perTurn()[col]-c.fifo[i].perTurn()[col])
	}
	return d
}

func printTable(out io.Writer, o Options, r results) {
	fmt.Fprint(out, "\n| scenario | figure | fair | fifo | goal | |\n|---|---|---:|---:|---|---|\n")
	row := func(sc, fig, f, q, goal, v string) {
		fmt.Fprintf(out, "| %s | %s | %s | %s | %s | %s |\n", sc, fig, f, q, goal, v)
	}
	if r.fair != nil && r.fifo != nil {
		printA(row, *r.fair, *r.fifo)
	}
	if b := r.b; b != nil {
		row("B", fmt.Sprintf("weights 1 / 3, bursts of %d each: share of running turns while both backlogged", o.BurstB),
			fmt.Sprintf("%.1f%% / %.1f%%", 100*b.share1, 100*b.share3), "", "25% / 75% ± 5%", verdict(b.backlogged > 0 && b.share3 >= 0.70 && b.share3 <= 0.80))
		row("B", "samples (100 ms) while both backlogged / in all; drained in", fmt.Sprintf("%d / %d; %.1f s", b.backlogged, b.samples, b.took.Seconds()), "", "", "")
	}
	if c := r.caps; c != nil {
		row("caps", fmt.Sprintf("max running turns of the weight-3 organization (max_running_turns = %d)", c.cap),
			fmt.Sprintf("%d", c.max3), "", fmt.Sprintf("≤ %d", c.cap), verdict(c.samples > 0 && c.max3 <= c.cap))
		row("caps", "samples (100 ms) / drained in; shares while both backlogged", fmt.Sprintf("%d / %.1f s; %.1f%% / %.1f%%", c.samples, c.took.Seconds(), 100*c.share1, 100*c.share3), "", "", "")
	}
	if fl := r.flood; fl != nil {
		row("admission", fmt.Sprintf("FLOOD (%d projects) accepted / refused (total %d, per project %d, per organization %d)",
			o.FloodProjects, fl.lim.Total, fl.lim.PerProject, fl.lim.PerOrganization), fmt.Sprintf("%d / %d", fl.floodSent, fl.floodRefused), "", "", "")
		row("admission", fmt.Sprintf("OTHER's %d sends over %s: refused", o.OtherSends, o.OtherOver), fmt.Sprintf("%d", fl.otherRefused), "", "0", verdict(fl.otherRefused == 0))
	}
	if r.cost != nil {
		printCost(row, r.cost)
	}
	fmt.Fprint(out, "\nQueue wait: planner_turns.started_at − created_at, from Postgres at the end; \"during the burst\" are QUIET's turns created between NOISY's first turn and NOISY's last turn's end. "+
		"Turns/s: the turns (of both organizations) finished in that window, divided by it. Slot share (A): each organization's running time integrated over the window (started_at..finished_at). "+
		"Shares (B) and caps: running turns per organization sampled from Postgres every 100 ms; B's shares only over the samples where both organizations had ready, undispatched turns. "+
		"Admission: no worker runs, so nothing drains. "+
		"Cost: Go CPU of this process (worker, load generator, pub/sub reader), the bench database's backends, the whole Redis server; statements from pg_stat_statements when loaded, else the driver; "+
		"each figure is the median over the rounds of its mode, and fair − fifo the median of the rounds' differences (fair and fifo run in turn, fair first in odd rounds) with their range. "+
		"The dispatcher's own cost: the CPU of its goroutines, each locked to its OS thread and read from the thread's clock (ballet_planner_dispatcher_cpu_seconds_total), less its enqueues, which fifo does in the api and workers, "+
		"plus the CPU of its Postgres backends (application_name ballet-dispatch) from /proc; it does not move with the rest of the run as the whole-run difference does.\n")
}

func printA(row func(sc, fig, f, q, goal, v string), fair, fifo resultA) {
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
}

func printCost(row func(sc, fig, f, q, goal, v string), c *costRounds) {
	pgOK := true
	for _, r := range append(slices.Clone(c.fair), c.fifo...) {
		pgOK = pgOK && r.PGCPUOK
	}
	ms := func(v float64) string { return fmt.Sprintf("%.3f ms", v) }
	pg := func(v float64) string {
		if !pgOK {
			return "n/a"
		}
		return ms(v)
	}
	turns := func(runs []Cost) string {
		if len(runs) == 0 {
			return ""
		}
		return fmt.Sprintf("%d × %d, %.0f", len(runs), runs[0].Turns, median(runs, 0))
	}
	row("cost", "rounds × turns, turns/s", turns(c.fair), turns(c.fifo), "", "")
	row("cost", "Go CPU per turn", ms(median(c.fair, 1)), ms(median(c.fifo, 1)), "", "")
	row("cost", "Postgres CPU per turn", pg(median(c.fair, 2)), pg(median(c.fifo, 2)), "", "")
	row("cost", "Redis CPU per turn", ms(median(c.fair, 3)), ms(median(c.fifo, 3)), "", "")
	row("cost", "CPU per turn, total", ms(median(c.fair, 4)), ms(median(c.fifo, 4)), "", "")
	row("cost", "statements per turn", fmt.Sprintf("%.1f", median(c.fair, 5)), fmt.Sprintf("%.1f", median(c.fifo, 5)), "", "")
	row("cost", "Redis commands per turn", fmt.Sprintf("%.1f", median(c.fair, 6)), fmt.Sprintf("%.1f", median(c.fifo, 6)), "", "")
	d := c.diffs(4)
	per := make([]string, len(d))
	for i, v := range d {
		per[i] = fmt.Sprintf("%+.3f", v)
	}
	row("cost", "whole run: CPU per turn fair − fifo", fmt.Sprintf("%+.3f ms", medianOf(slices.Clone(d))), "rounds: "+strings.Join(per, ", "), "", "")
	row("cost", "whole run: Go / Postgres / Redis CPU per turn fair − fifo",
		fmt.Sprintf("%+.3f / %+.3f / %+.3f ms", medianOf(c.diffs(1)), medianOf(c.diffs(2)), medianOf(c.diffs(3))), "", "", "")
	row("cost", "whole run: statements / Redis commands per turn fair − fifo", fmt.Sprintf("%+.1f / %+.1f", medianOf(c.diffs(5)), medianOf(c.diffs(6))), "", "", "")
	goAll, enq, pgOwn := median(c.fair, 8), median(c.fair, 9), median(c.fair, 7)
	row("cost", "dispatcher: Go CPU per turn (of it enqueueing, which fifo does elsewhere)", fmt.Sprintf("%.3f ms (%.3f ms)", goAll, enq), "", "", "")
	row("cost", "dispatcher: its own Postgres connections' CPU per turn", pg(pgOwn), "", "", "")
	added := goAll - enq + pgOwn
	row("cost", "dispatcher: CPU it adds per turn (Go but enqueueing, and its Postgres)", fmt.Sprintf("%.3f ms", added), "", "≤ 0.3 ms",
		verdict(len(c.fair) > 0 && pgOK && goAll > 0 && added <= 0.3))
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

// perTurn is turns/s, Go, Postgres, Redis and total CPU ms per turn,
// statements and Redis commands per turn, the Postgres CPU ms per turn of
// the dispatcher's own connections, and the Go CPU ms per turn of its
// goroutines and of their enqueues.
func (c Cost) perTurn() []float64 {
	n := float64(max(c.Turns, 1))
	perMS := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / n }
	pg := c.PGCPU
	if !c.PGCPUOK {
		pg = 0
	}
	return []float64{float64(c.Turns) / max(c.Took.Seconds(), 1e-9), perMS(c.GoCPU), perMS(pg), perMS(c.RedisCPU),
		perMS(c.GoCPU + pg + c.RedisCPU), float64(c.Statements) / n, float64(c.RedisCmds) / n, perMS(c.PGDispatchCPU), perMS(c.DispatchGoCPU), perMS(c.DispatchEnqueueCPU)}
}
