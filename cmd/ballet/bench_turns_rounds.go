package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// runRounds runs the modes o.rounds times, in alternating order, printing
// each round's tables. With more than one round, an unmeasured warm-up of
// each mode (one message a session) runs first: the first mode of a run
// otherwise pays for the fake model's and the server's warm-up, and in
// alternating rounds that is always the same mode.
func runRounds(ctx context.Context, cfg Config, o turnBenchOptions, modes []string, fake *fakeProcess, out io.Writer) ([]turnRound, error) {
	if o.rounds > 1 {
		fmt.Fprintf(out, "\nwarm-up: %d sessions × 1 message in each mode, unmeasured\n", o.sessions)
		w := o
		w.messages, w.cpuProfile = 1, ""
		for _, mode := range modes {
			if _, err := runTurnMode(ctx, cfg, w, mode, fake, io.Discard); err != nil {
				return nil, fmt.Errorf("bench turns (%s, warm-up): %w", mode, err)
			}
		}
	}
	rounds := make([]turnRound, 0, o.rounds)
	for r := range o.rounds {
		order := roundOrder(modes, r)
		if o.rounds > 1 {
			fmt.Fprintf(out, "\n## Round %d of %d (%s)\n", r+1, o.rounds, strings.Join(order, ", "))
		}
		results := map[string][]turnTimes{}
		took := map[string]time.Duration{}
		costs := map[string]turnCost{}
		pgss := false
		for _, mode := range order {
			res, err := runTurnMode(ctx, cfg, o, mode, fake, out)
			if err != nil {
				return nil, fmt.Errorf("bench turns (%s): %w", mode, err)
			}
			results[mode], took[mode], costs[mode] = res.times, res.took, res.cost
			pgss = pgss || res.cost.pgssCalls >= 0
		}
		fmt.Fprintln(out)
		printTurnTable(out, results, took)
		printCostTable(out, costs, pgss)
		rounds = append(rounds, newTurnRound(results, took, costs))
	}
	return rounds, nil
}

// turnRound is one round of `ballet bench turns --rounds`: each mode's
// turns, the time they took and the fake model's CPU over them.
type turnRound struct {
	turns    map[string]int
	took     map[string]time.Duration
	modelCPU map[string]time.Duration
}

func newTurnRound(results map[string][]turnTimes, took map[string]time.Duration, costs map[string]turnCost) turnRound {
	r := turnRound{turns: map[string]int{}, took: map[string]time.Duration{}, modelCPU: map[string]time.Duration{}}
	for mode, ts := range results {
		r.turns[mode], r.took[mode], r.modelCPU[mode] = len(ts), took[mode], costs[mode].modelCPU
	}
	return r
}

// rate is the mode's turns/s in the round, 0 when it did not run.
func (r turnRound) rate(mode string) float64 {
	if r.took[mode] <= 0 {
		return 0
	}
	return float64(r.turns[mode]) / r.took[mode].Seconds()
}

// hostRatio is the fake model's CPU per turn in queue mode ÷ in direct
// mode. The fake model does the same work for a turn in both modes, so
// this tracks how fast the host ran each mode: other load on the same
// cores moves it most, the mode's own load (its processes' switches and
// caches) a little. Above 1 when the queue ran on a slower host than the
// direct loop. ok is false when either mode's model CPU could not be
// read.
func (r turnRound) hostRatio() (float64, bool) {
	q, d := r.modelCPU["queue"], r.modelCPU["direct"]
	if q <= 0 || d <= 0 || r.turns["queue"] == 0 || r.turns["direct"] == 0 {
		return 0, false
	}
	return (q.Seconds() / float64(r.turns["queue"])) / (d.Seconds() / float64(r.turns["direct"])), true
}

// roundOrder is the order of the modes in round r (from 0): as given in
// even rounds, reversed in odd ones, so that neither mode always runs on
// the server state the other left behind.
func roundOrder(modes []string, r int) []string {
	order := slices.Clone(modes)
	if r%2 == 1 {
		slices.Reverse(order)
	}
	return order
}

// printRounds prints each round's turns/s and queue ÷ direct ratio, the
// median ratio and the pooled one (all turns ÷ all time, per mode); beside
// them the fake model's CPU ratio (hostRatio) and the queue ÷ direct ratio
// at equal host speed, each round's ratio times its host ratio, with their
// median, mean and the mean's standard error.
func printRounds(out io.Writer, rounds []turnRound) {
	both := rounds[0].took["queue"] > 0 && rounds[0].took["direct"] > 0
	fmt.Fprintf(out, "\n### Rounds (%d; the order of the modes alternates)\n", len(rounds))
	fmt.Fprintln(out, "| round | queue turns/s | direct turns/s | queue ÷ direct | fake model CPU/turn, queue ÷ direct | queue ÷ direct at equal host speed |\n|---:|---:|---:|---:|---:|---:|")
	var ratios, equal []float64
	pooled := turnRound{turns: map[string]int{}, took: map[string]time.Duration{}, modelCPU: map[string]time.Duration{}}
	for i, r := range rounds {
		ratio, host, at := "–", "–", "–"
		if both {
			v := r.rate("queue") / r.rate("direct")
			ratios = append(ratios, v)
			ratio = fmt.Sprintf("%.2f", v)
			if h, ok := r.hostRatio(); ok {
				equal = append(equal, v*h)
				host, at = fmt.Sprintf("%.2f", h), fmt.Sprintf("%.2f", v*h)
			}
		}
		fmt.Fprintf(out, "| %d | %s | %s | %s | %s | %s |\n", i+1, rateCell(r, "queue"), rateCell(r, "direct"), ratio, host, at)
		for mode, n := range r.turns {
			pooled.turns[mode] += n
			pooled.took[mode] += r.took[mode]
			pooled.modelCPU[mode] += r.modelCPU[mode]
		}
	}
	fmt.Fprintf(out, "| all | %s | %s |", rateCell(pooled, "queue"), rateCell(pooled, "direct"))
	if !both {
		fmt.Fprintln(out, " – | – | – |")
		return
	}
	all := pooled.rate("queue") / pooled.rate("direct")
	host, at := "–", "–"
	if h, ok := pooled.hostRatio(); ok {
		host, at = fmt.Sprintf("%.2f", h), fmt.Sprintf("%.2f", all*h)
	}
	fmt.Fprintf(out, " %.2f | %s | %s |\n\nqueue ÷ direct: median of the rounds %.2f, pooled (all turns ÷ all time of each mode) %.2f\n",
		all, host, at, median(ratios), all)
	if len(equal) == 0 {
		fmt.Fprintln(out, "at equal host speed: – (the fake model's CPU could not be read from /proc)")
		return
	}
	mean, se := meanSE(equal)
	fmt.Fprintf(out, "at equal host speed (each round's ratio × its fake model CPU ratio; %d of %d rounds): median %.3f, mean %.3f ± %.3f (standard error)\n",
		len(equal), len(rounds), median(equal), mean, se)
	fmt.Fprintln(out, "The fake model does the same work for a turn in both modes; its CPU per turn tracks how fast the host ran each mode, which other load on the same cores changes, and a little the mode's own load. Above 1: the queue's run had the slower host.")
}

func rateCell(r turnRound, mode string) string {
	if r.took[mode] <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f", r.rate(mode))
}

// median of xs, which it sorts; 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	if n := len(xs); n%2 == 0 {
		return (xs[n/2-1] + xs[n/2]) / 2
	}
	return xs[len(xs)/2]
}

// meanSE is the mean of xs and its standard error (the sample standard
// deviation ÷ √n; 0 for fewer than two).
func meanSE(xs []float64) (mean, se float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	if len(xs) < 2 {
		return mean, 0
	}
	var ss float64
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(ss/float64(len(xs)-1)) / math.Sqrt(float64(len(xs)))
}
