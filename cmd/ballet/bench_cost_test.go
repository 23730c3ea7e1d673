package main

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/store/storetest"
)

// TestBenchTurnsCostTable runs a tiny `ballet bench turns` of two rounds for
// its per-turn cost table, its rounds and its fresh databases, not for its
// figures.
func TestBenchTurnsCostTable(t *testing.T) {
	t.Parallel()
	url := storetest.URL(t)
	out, stderr, code := ballet(t, []string{"BALLET_DATABASE_URL=" + url}, "bench", "turns",
		"--sessions", "2", "--messages", "2", "--rounds", "2", "--memory-turns", "2", "--memory-latency", "200ms")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, stderr)
	}
	for _, want := range []string{
		"database: a fresh one per mode (ballet_bench_<random>, migrated), dropped at the end",
		"| mode | turns | turns/s |",
		"| mode | turns/s | Go CPU ms/turn | Postgres CPU ms/turn | Redis CPU ms/turn | total | statements/turn",
		"| queue ÷ direct |",
		"Redis commands/turn, top 5: ",
		"of them on TLS); whole server",
		"### Memory per running turn (queue, 2 sessions × 1 message, model latency 200ms",
		"\nwarm-up: 2 sessions × 1 message in each mode, unmeasured\n",
		"## Round 1 of 2 (queue, direct)\n",
		"## Round 2 of 2 (direct, queue)\n",
		"### Rounds (2; the order of the modes alternates)\n| round | queue turns/s | direct turns/s | queue ÷ direct | fake model CPU/turn, queue ÷ direct | queue ÷ direct at equal host speed |\n",
		"\nat equal host speed",
		"\nqueue ÷ direct: median of the rounds ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, mode := range []string{"queue", "direct"} {
		row := regexp.MustCompile(`(?m)^\| ` + mode + ` \| [0-9]+ \| [0-9.]+ \| [0-9.]+ \| .*$`).FindString(out)
		cells := strings.Split(strings.Trim(row, "| "), " | ")
		if len(cells) != 12 {
			t.Fatalf("%s: cost row %q has %d cells, want 12:\n%s", mode, row, len(cells), out)
		}
		if v, err := strconv.ParseFloat(cells[11], 64); err != nil || v <= 0 {
			t.Errorf("%s: fake model CPU = %q, want a number > 0", mode, cells[11])
		}
		for i, name := range map[int]string{5: "statements/turn", 6: "round trips/turn", 7: "commits/turn", 9: "Redis cmds/turn"} {
			if v, err := strconv.ParseFloat(cells[i], 64); err != nil || v <= 0 {
				t.Errorf("%s: %s = %q, want a number > 0", mode, name, cells[i])
			}
		}
	}
	// The fake model's CPU is read to the nanosecond: every round has its
	// host ratio and the ratio at equal host speed.
	if rows := regexp.MustCompile(`(?m)^\| (?:1|2|all) \| [0-9]+ \| [0-9]+ \| [0-9]+\.[0-9]{2} \| [0-9]+\.[0-9]{2} \| [0-9]+\.[0-9]{2} \|$`).FindAllString(out, -1); len(rows) != 3 {
		t.Errorf("want the rows of rounds 1, 2 and all with turns/s and a ratio, got %q:\n%s", rows, out)
	}
	names := regexp.MustCompile(`(?m)^(?:queue|direct): database (ballet_bench_[0-9a-f]+)$`).FindAllStringSubmatch(out, -1)
	seen := map[string]bool{}
	for _, n := range names {
		seen[n[1]] = true
	}
	if len(names) != 4 || len(seen) != 4 {
		t.Fatalf("want a database of its own for each mode in each round, got %q:\n%s", names, out)
	}
	db := openURL(t, url)
	for _, n := range names {
		var left int
		if err := db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM pg_database WHERE datname = $1`, n[1]).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left != 0 {
			t.Errorf("database %s is left after the bench", n[1])
		}
	}
}

func TestBenchTurnsRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--mode", "queue,nope"}, `bench turns: --mode: unknown mode "nope" (queue, direct)`},
		{[]string{"--sessions", "0"}, "bench turns: --sessions: must be at least 1"},
		{[]string{"--messages", "-1"}, "bench turns: --messages: must be at least 1"},
		{[]string{"--rounds", "0"}, "bench turns: --rounds: must be at least 1"},
		{[]string{"--memory-turns", "-2"}, "bench turns: --memory-turns: must not be negative"},
		{[]string{"--latency", "-1s"}, "bench turns: --latency and --memory-latency: must not be negative"},
		{[]string{"--reuse-database", "--keep-database"}, "--keep-database and --reuse-database exclude each other"},
		{[]string{"--sessions", "x"}, `invalid argument "x" for "--sessions"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			_, stderr, code := ballet(t, nil, append([]string{"bench", "turns"}, tc.args...)...)
			if code != 2 || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, stderr, tc.want)
			}
		})
	}
}

func TestBenchTurnsRoundHelpers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		round int
		want  string
	}{{0, "queue,direct"}, {1, "direct,queue"}, {2, "queue,direct"}} {
		if got := strings.Join(roundOrder([]string{"queue", "direct"}, tc.round), ","); got != tc.want {
			t.Errorf("roundOrder(round %d) = %s, want %s", tc.round, got, tc.want)
		}
	}
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{{nil, 0}, {[]float64{0.9}, 0.9}, {[]float64{1, 0.8, 0.9}, 0.9}, {[]float64{1, 0.8, 0.9, 0.95}, 0.925}} {
		if got := median(tc.xs); got < tc.want-1e-9 || got > tc.want+1e-9 {
			t.Errorf("median(%v) = %v, want %v", tc.xs, got, tc.want)
		}
	}
}
