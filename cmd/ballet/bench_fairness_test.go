package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/store/storetest"
)

// TestBenchFairnessPrintsTheTable runs a tiny `ballet bench fairness` for
// its rows and the one figure that holds however slow the machine is: the
// cap. The waits depend on how fast the burst arrives, so none is compared;
// the order the dispatcher gives slots in is tested in worker/dispatch and
// worker (dispatch_test.go).
func TestBenchFairnessPrintsTheTable(t *testing.T) {
	t.Parallel()
	url := storetest.URL(t)
	out, stderr, code := ballet(t, []string{"BALLET_DATABASE_URL=" + url}, "bench", "fairness",
		"--concurrency", "2", "--latency", "200ms", "--quiet-every", "200ms", "--quiet-alone", "1s",
		"--noisy-projects", "2", "--noisy-sessions", "20", "--burst-b", "12", "--cap", "1",
		"--flood-total", "40", "--flood-per-project", "5", "--flood-projects", "11", "--other-sends", "5", "--other-over", "200ms",
		"--cost-sessions", "4", "--cost-messages", "2", "--cost-concurrency", "8", "--cost-rounds", "2")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, stderr)
	}
	for _, want := range []string{
		"| scenario | figure | fair | fifo | goal | |",
		"| A | QUIET turns alone / during the burst |",
		"| A | QUIET queue wait alone p50 |", "| A | QUIET queue wait alone p99 |",
		"| A | QUIET queue wait during the burst p50 |", "| A | QUIET queue wait during the burst p99 |",
		"| A | burst: turns/s |", "| A | burst: turns/s fair ÷ fifo |", "| A | burst: slot share QUIET / NOISY |",
		"| B | weights 1 / 3, bursts of 12 each: share of running turns while both backlogged |",
		"| caps | max running turns of the weight-3 organization (max_running_turns = 1) |",
		"| admission | FLOOD (11 projects) accepted / refused (total 40, per project 5, per organization 20) |",
		"| admission | OTHER's 5 sends over 200ms: refused |",
		"| cost | CPU per turn, total |", "| cost | statements per turn |", "| cost | Redis commands per turn |",
		"| cost | whole run: CPU per turn fair − fifo |",
		"| cost | dispatcher: CPU it adds per turn (Go but enqueueing, and its Postgres) |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// The dispatcher's own CPU is read: its goroutines' and its backends'.
	if m := regexp.MustCompile(`\| cost \| dispatcher: Go CPU per turn \(of it enqueueing, which fifo does elsewhere\) \| ([0-9.]+) ms`).FindStringSubmatch(out); m == nil || m[1] == "0.000" {
		t.Errorf("the dispatcher's Go CPU is not read:\n%s", out)
	}
	// The cap is a hard limit, whatever the timing.
	if !regexp.MustCompile(`\| caps \| max running turns of the weight-3 organization \(max_running_turns = 1\) \| [01] \|`).MatchString(out) {
		t.Errorf("the cap of 1 was exceeded:\n%s", out)
	}
	if strings.Contains(stderr, "panic") {
		t.Errorf("stderr has a panic:\n%s", stderr)
	}
}
