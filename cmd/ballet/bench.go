package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// benchCommands make the subcommands of `ballet bench`, by name. Each
// lives in a file of its own (bench_<name>.go); a file may add its entry in
// an init function.
var benchCommands = map[string]func() *cobra.Command{
	"gateway": newBenchGatewayCmd,
}

func newBenchCmd() *cobra.Command {
	names := slices.Sorted(maps.Keys(benchCommands))
	subs := make([]*cobra.Command, 0, len(names))
	for _, name := range names {
		subs = append(subs, benchCommands[name]())
	}
	c := newGroupCmd("bench", "run a benchmark against this configuration ("+strings.Join(names, ", ")+")", subs...)
	c.Long = "Benchmarks of a running configuration. Results are written up in docs/benchmarks.md."
	return c
}

// parseCounts parses a comma-separated list of positive integers.
func parseCounts(flagName, s string) ([]int, error) {
	var out []int
	for part := range strings.SplitSeq(s, ",") {
		var n int
		if _, err := fmt.Sscanf(strings.TrimSpace(part), "%d", &n); err != nil || n < 1 {
			return nil, usageError{fmt.Sprintf("%s: expected positive integers separated by commas, got %q", flagName, s)}
		}
		out = append(out, n)
	}
	return out, nil
}

// percentile returns the nearest-rank p-th percentile (0 < p ≤ 100) of
// sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(p/100*float64(len(sorted))+0.999999) - 1
	return sorted[max(0, min(rank, len(sorted)-1))]
}

// quantiles holds p50, p95 and p99 of a sample.
type quantiles struct{ p50, p95, p99 time.Duration }

func quantilesOf(samples []time.Duration) quantiles {
	s := slices.Clone(samples)
	slices.Sort(s)
	return quantiles{percentile(s, 50), percentile(s, 95), percentile(s, 99)}
}

// ms formats a duration in milliseconds with a precision that suits it.
func ms(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	switch {
	case v < 10:
		return fmt.Sprintf("%.2f", v)
	case v < 100:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}
