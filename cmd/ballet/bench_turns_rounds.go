package main

import (
	"context"
	"fmt"
	"io"
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
		rounds = append(rounds, newTurnRound(results, took))
	}
	return rounds, nil
}

// turnRound is one round of `ballet bench turns --rounds`: each mode's
// turns and the time they took.
type turnRound struct {
	turns map[string]int
	took  map[string]time.Duration
}

func newTurnRound(results map[string][]turnTimes, took map[string]time.Duration) turnRound {
	r := turnRound{turns: map[string]int{}, took: map[string]time.Duration{}}
	for mode, ts := range results {
		r.turns[mode], r.took[mode] = len(ts), took[mode]
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
// median ratio and the pooled one (all turns ÷ all time, per mode).
func printRounds(out io.Writer, rounds []turnRound) {
	both := rounds[0].took["queue"] > 0 && rounds[0].took["direct"] > 0
	fmt.Fprintf(out, "\n### Rounds (%d; the order of the modes alternates)\n", len(rounds))
	fmt.Fprintln(out, "| round | queue turns/s | direct turns/s | queue ÷ direct |\n|---:|---:|---:|---:|")
	var ratios []float64
	pooled := turnRound{turns: map[string]int{}, took: map[string]time.Duration{}}
	for i, r := range rounds {
		ratio := "–"
		if both {
			v := r.rate("queue") / r.rate("direct")
			ratios = append(ratios, v)
			ratio = fmt.Sprintf("%.2f", v)
		}
		fmt.Fprintf(out, "| %d | %s | %s | %s |\n", i+1, rateCell(r, "queue"), rateCell(r, "direct"), ratio)
		for mode, n := range r.turns {
			pooled.turns[mode] += n
			pooled.took[mode] += r.took[mode]
		}
	}
	fmt.Fprintf(out, "| all | %s | %s |", rateCell(pooled, "queue"), rateCell(pooled, "direct"))
	if !both {
		fmt.Fprintln(out, " – |")
		return
	}
	all := pooled.rate("queue") / pooled.rate("direct")
	fmt.Fprintf(out, " %.2f |\n\nqueue ÷ direct: median of the rounds %.2f, pooled (all turns ÷ all time of each mode) %.2f\n",
		all, median(ratios), all)
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
