package benchfair

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
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
	case o.CostSessions < 1 || o.CostMessages < 1 || o.CostRounds < 1:
		return fmt.Errorf("--cost-sessions, --cost-messages and --cost-rounds: must be at least 1")
	}
	for _, s := range o.Scenarios {
		if !slices.Contains(Scenarios, s) {
			return fmt.Errorf("--scenarios: unknown scenario %q (known: %s)", s, strings.Join(Scenarios, ", "))
		}
	}
	return nil
}

// results are what the scenarios that ran found; a scenario that did
// not run leaves its field nil.
type results struct {
	fair, fifo *resultA
	b, caps    *resultB
	flood      *resultFlood
	cost       *costRounds
}

// Run runs the scenarios o selects and prints the table.
func Run(ctx context.Context, d Deps, o Options, out io.Writer) error {
	if err := o.Validate(); err != nil {
		return err
	}
	fmt.Fprintf(out, "bench fairness: worker concurrency %d, fake model latency %s; QUIET sends every %s (a new session each), %s alone; NOISY bursts %d projects × %d sessions = %d turns; scenario B bursts %d + %d; cap %d; cost %d sessions × %d messages at concurrency %d, latency 0, %d rounds of each mode\n",
		o.Concurrency, o.Latency, o.QuietEvery, o.QuietAlone, o.NoisyProjects, o.NoisySessions, o.NoisyProjects*o.NoisySessions,
		o.BurstB, o.BurstB, o.Cap, o.CostSessions, o.CostMessages, o.CostConcurency, o.CostRounds)
	fmt.Fprintln(out, "database: a fresh one per scenario and mode (migrated, dropped at the end); Redis: a namespace of its own each")
	step := func(name string, run func() error) error {
		start := time.Now()
		fmt.Fprintf(out, "… %s", name)
		if err := run(); err != nil {
			fmt.Fprintln(out)
			return fmt.Errorf("%s: %w", name, err)
		}
		fmt.Fprintf(out, " (%.1f s)\n", time.Since(start).Seconds())
		return nil
	}
	var res results
	var steps []func() error
	if o.runs("a") {
		steps = append(steps, func() error {
			return step("scenario A, fair", func() (err error) { res.fair, err = ptr(scenarioA(ctx, d, o, "fair")); return err })
		}, func() error {
			return step("scenario A, fifo", func() (err error) { res.fifo, err = ptr(scenarioA(ctx, d, o, "fifo")); return err })
		})
	}
	if o.runs("b") {
		steps = append(steps, func() error {
			return step("scenario B, weights 1 and 3", func() (err error) { res.b, err = ptr(scenarioB(ctx, d, o, 0)); return err })
		})
	}
	if o.runs("caps") {
		steps = append(steps, func() error {
			return step(fmt.Sprintf("scenario B with max_running_turns = %d on the weight-3 organization", o.Cap),
				func() (err error) { res.caps, err = ptr(scenarioB(ctx, d, o, o.Cap)); return err })
		})
	}
	if o.runs("flood") {
		steps = append(steps, func() error {
			return step("admission, the flood", func() (err error) { res.flood, err = ptr(scenarioFlood(ctx, d, o)); return err })
		})
	}
	if o.runs("cost") {
		res.cost = &costRounds{}
		for i := range o.CostRounds {
			// fair, fifo, fifo, fair, …: a drift of the machine's load
			// weighs on both modes alike.
			modes := []string{"fair", "fifo"}
			if i%2 == 1 {
				modes = []string{"fifo", "fair"}
			}
			for _, mode := range modes {
				steps = append(steps, func() error {
					return step(fmt.Sprintf("dispatcher cost, round %d, %s", i+1, mode), func() error {
						c, err := scenarioCost(ctx, d, o, mode)
						if err != nil {
							return err
						}
						res.cost.add(mode, c)
						return nil
					})
				})
			}
		}
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return err
		}
	}
	printTable(out, o, res)
	return nil
}

func ptr[T any](v T, err error) (*T, error) {
	if err != nil {
		return nil, err
	}
	return &v, nil
}
