package main

import (
	"strings"
	"testing"

	"github.com/balletplanner/ballet/store/storetest"
)

// TestBenchEmbedPrintsTheTables runs a tiny `ballet bench embed`, both
// kinds, for its output, not for its figures.
func TestBenchEmbedPrintsTheTables(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"throughput", []string{"--items", "40", "--projects", "2", "--concurrency", "1,2"},
			[]string{"| embed_concurrency | items | seconds (worker start → last vector) | items/s |", "| 1 | 40 |", "| 2 | 40 |"}},
		{"turns", []string{"--turns", "--items", "40", "--projects", "2", "--sessions", "2", "--messages", "2", "--rounds", "2"},
			[]string{"| round | run | turns | turns/s |", "| 1 | alone | 4 |", "| 2 | during backfill | 4 |", "turns/s during the backfill ÷ alone: median "}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env := []string{"BALLET_DATABASE_URL=" + storetest.URL(t), "BALLET_SEARCH_EMBED_DELAY=100ms"}
			out, stderr, code := ballet(t, env, append([]string{"bench", "embed"}, tt.args...)...)
			if code != 0 {
				t.Fatalf("exit %d\n%s\n%s", code, out, stderr)
			}
			for _, want := range tt.want {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
		})
	}
}

func TestBenchEmbedRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--items", "0"}, "--items and --projects must be positive"},
		{[]string{"--items", "3", "--projects", "5"}, "no more projects than items"},
		{[]string{"--concurrency", "1,x"}, "--concurrency"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			_, stderr, code := ballet(t, nil, append([]string{"bench", "embed"}, tc.args...)...)
			if code != 2 || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, stderr, tc.want)
			}
		})
	}
}
