package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"time"
)

// benchCommands are the subcommands of `ballet bench`, by name. Each lives
// in a file of its own (bench_<name>.go); a file may add its entry in an
// init function.
var benchCommands = map[string]func(ctx context.Context, args []string, out io.Writer) error{
	"gateway": benchGateway,
}

// benchSummaries describe the subcommands in `ballet bench --help`; a
// subcommand without one is listed by name only.
var benchSummaries = map[string]string{
	"gateway": "added latency and time to first byte of the LLM gateway vs. the upstream alone",
}

func benchUsage(w io.Writer) {
	fmt.Fprintln(w, "Usage: ballet bench <what> [flags]\n\nBenchmarks of a running configuration:")
	names := make([]string, 0, len(benchCommands))
	for name := range benchCommands {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(w, "  %-9s %s\n", name, benchSummaries[name])
	}
	fmt.Fprintln(w, "\nRun 'ballet bench <what> --help' for its flags. Results are written up in docs/benchmarks.md.")
}

func runBench(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		benchUsage(os.Stderr)
		if len(args) == 0 {
			return usageError{"bench: expected what to benchmark"}
		}
		return flag.ErrHelp
	}
	run, ok := benchCommands[args[0]]
	if !ok {
		benchUsage(os.Stderr)
		return usageError{fmt.Sprintf("bench: unknown benchmark %q", args[0])}
	}
	return run(ctx, args[1:], out)
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
