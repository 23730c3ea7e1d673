package benchfair

import (
	"strings"
	"testing"
	"time"
)

func validOptions() Options {
	return Options{Concurrency: 10, Latency: time.Second, QuietEvery: time.Second, NoisyProjects: 1, NoisySessions: 1,
		BurstB: 1, Cap: 1, FloodTotal: 1, FloodProject: 1, FloodProjects: 1, CostSessions: 1, CostMessages: 1,
		CostConcurency: 1, CostRounds: 1}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		edit func(*Options)
		want string // "" valid
	}{
		{"defaults", func(*Options) {}, ""},
		{"some scenarios", func(o *Options) { o.Scenarios = []string{"cost", "a"} }, ""},
		{"unknown scenario", func(o *Options) { o.Scenarios = []string{"cost", "c"} }, `--scenarios: unknown scenario "c" (known: a, b, caps, flood, cost)`},
		{"no cost rounds", func(o *Options) { o.CostRounds = 0 }, "--cost-rounds: must be at least 1"},
		{"negative latency", func(o *Options) { o.Latency = -1 }, "--latency: must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := validOptions()
			tc.edit(&o)
			err := o.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Validate = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestCostRoundsMedians(t *testing.T) {
	t.Parallel()
	c := &costRounds{}
	for _, ms := range []int{10, 30, 20} {
		c.add("fair", Cost{Turns: 1, GoCPU: time.Duration(ms) * time.Millisecond, Took: time.Second})
	}
	for _, ms := range []int{9, 31, 15} {
		c.add("fifo", Cost{Turns: 1, GoCPU: time.Duration(ms) * time.Millisecond, Took: time.Second})
	}
	if got := median(c.fair, 1); got != 20 {
		t.Errorf("median fair Go CPU = %v, want 20", got)
	}
	// Differences round by round: +1, -1, +5; their median is +1, not
	// median(fair) − median(fifo) = +5.
	if got := medianOf(c.diffs(1)); got != 1 {
		t.Errorf("median difference = %v, want 1", got)
	}
}
