package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/balletplanner/ballet/store/storetest"
)

// TestBenchGatewayPrintsTheTable runs a tiny `ballet bench gateway` for its
// output and its clean-up, not for its figures.
func TestBenchGatewayPrintsTheTable(t *testing.T) {
	t.Parallel()
	url := storetest.URL(t)
	out, stderr, code := ballet(t, []string{"BALLET_DATABASE_URL=" + url}, "bench", "gateway", "--concurrency", "1,3", "--requests", "6")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	for _, want := range []string{"| streams | metric | direct p50 |", "| 1 | latency |", "| 1 | TTFB |", "| 3 | latency |", "| 3 | TTFB |"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
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

func TestBenchRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "Usage: ballet bench <what>"},
		{[]string{"nope"}, 2, `unknown benchmark "nope"`},
		{[]string{"gateway", "--concurrency", "1,x"}, 2, "--concurrency"},
		{[]string{"gateway", "--help"}, 0, "Usage: ballet bench gateway"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			_, stderr, code := ballet(t, nil, append([]string{"bench"}, tc.args...)...)
			if code != tc.code || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, stderr, tc.code, tc.want)
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
