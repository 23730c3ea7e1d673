package main

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/balletplanner/ballet/store/storetest"
)

// TestBenchGatewayPrintsTheTable runs a tiny `ballet bench gateway` for its
// output and its clean-up, not for its figures beyond that the fake
// upstream's CPU, read from its own process, is in them.
func TestBenchGatewayPrintsTheTable(t *testing.T) {
	t.Parallel()
	url := storetest.URL(t)
	out, stderr, code := ballet(t, []string{"BALLET_DATABASE_URL=" + url}, "bench", "gateway", "--concurrency", "1,3", "--requests", "6")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	for _, want := range []string{"the upstream over TLS", "| streams | metric | direct p50 |", "| 1 | latency |", "| 1 | TTFB |", "| 3 | latency |", "| 3 | TTFB |",
		"| streams | direct CPU/call | gateway CPU/call | ratio | added CPU/call | fake upstream's CPU/call, direct / gateway |",
		"| streams | direct allocs/call | gateway allocs/call |"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// The fake upstream is a process of its own, and its CPU was read:
	// above zero through either target, and in both targets' totals.
	for _, streams := range []string{"1", "3"} {
		re := regexp.MustCompile(`\| ` + streams + ` \| ([0-9]+) µs \| ([0-9]+) µs \| [0-9.]+× \| -?[0-9]+ µs \| ([0-9]+) / ([0-9]+) µs \|`)
		m := re.FindStringSubmatch(out)
		if m == nil {
			t.Errorf("no CPU row for %s streams:\n%s", streams, out)
			continue
		}
		n := make([]int, 4)
		for i := range n {
			n[i], _ = strconv.Atoi(m[i+1]) // digits, by the pattern
		}
		d, g, fd, fg := n[0], n[1], n[2], n[3]
		if fd == 0 || fg == 0 || fd > d || fg > g {
			t.Errorf("%s streams: fake upstream %d / %d µs a call of %d / %d µs in all:\n%s", streams, fd, fg, d, g, out)
		}
	}
	// The throwaway organization, with its credential and usage, is gone.
	db := openURL(t, url)
	var orgs, usage int
	if err := db.Pool().QueryRow(context.Background(),
		`SELECT (SELECT count(*) FROM organizations), (SELECT count(*) FROM usage)`).Scan(&orgs, &usage); err != nil {
		t.Fatal(err)
	}
	if orgs != 0 || usage != 0 {
		t.Errorf("after the bench: %d organizations, %d usage rows", orgs, usage)
	}
}

// TestBenchRealtimePrintsTheTables runs a tiny `ballet bench realtime`
// (a real api child process, helper client processes) for its output and
// its clean-up, not for its figures.
func TestBenchRealtimePrintsTheTables(t *testing.T) {
	t.Parallel()
	url := storetest.URL(t)
	out, stderr, code := ballet(t, []string{"BALLET_DATABASE_URL=" + url}, "bench", "realtime",
		"--idle", "20", "--idle-hold", "1s", "--api-memory-limit", "512MiB", "--watchers", "3", "--rate", "60", "--shared-rate", "10", "--duration", "300ms", "--turns", "2")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, stderr)
	}
	for _, want := range []string{
		"| sockets | opened in | api RSS at 0 | api RSS at N | RSS per socket |", "| 20 |",
		"steady state over 1s of heartbeats (GOMEMLIMIT of the api: 512MiB): api RSS at most ",
		"| watchers | sockets | published/s | frames/s | kind | frames | p50 | p90 | p99 | max | lagging |",
		"| own session each | 3 |", "| one shared session | 3 |",
		"| what | turns | p50 | p90 | p99 | max | note |",
		"| planner.cancel of a streaming turn → done at the socket | 2 |", `done "cancelled" ×2`,
		"| planner.send → first text at the socket (queue, worker) | 2 |",
		"| in-process: SendMessage + RunTurn → first text on Redis | 2 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(stderr, "panic") {
		t.Errorf("stderr has a panic:\n%s", stderr)
	}
}

func TestBenchRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "Usage:\n  ballet bench <command>"},
		{[]string{"nope"}, 2, `unknown command "nope" for "ballet bench"`},
		{[]string{"gateway", "--concurrency", "1,x"}, 2, "--concurrency"},
		{[]string{"gateway", "--help"}, 0, "Usage:\n  ballet bench gateway"},
		{[]string{"realtime", "--phases", "idle,nope"}, 2, `--phases: unknown phase "nope"`},
		{[]string{"realtime", "--watchers", "0"}, 2, "--watchers: must be at least 1"},
		{[]string{"realtime", "--help"}, 0, "Usage:\n  ballet bench realtime"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			out, stderr, code := ballet(t, nil, append([]string{"bench"}, tc.args...)...)
			if tc.code == 0 {
				stderr = out // help is printed to stdout
			}
			if code != tc.code || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, output %q; want %d and %q", code, stderr, tc.code, tc.want)
			}
		})
	}
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	var s []time.Duration
	for i := 1; i <= 100; i++ {
		s = append(s, time.Duration(i)*time.Millisecond)
	}
	q := quantilesOf(s)
	if q.p50 != 50*time.Millisecond || q.p95 != 95*time.Millisecond || q.p99 != 99*time.Millisecond {
		t.Fatalf("quantiles = %+v", q)
	}
	if got := percentile([]time.Duration{7}, 99); got != 7 {
		t.Fatalf("percentile of one = %v", got)
	}
}
