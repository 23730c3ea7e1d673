package worker

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestTurnBucketsReachTheTimeout: the turn-duration histogram's last bucket
// is worker.turn_timeout, so a turn that runs out its time is in a bucket.
func TestTurnBucketsReachTheTimeout(t *testing.T) {
	t.Parallel()
	tests := []struct {
		timeout time.Duration
		last    float64
	}{
		{30 * time.Minute, 1800},
		{10 * time.Second, 10},
		{time.Second, 1},
		{0, DefaultConfig().TurnTimeout.Seconds()},
	}
	for _, tt := range tests {
		b := turnBuckets(tt.timeout)
		if b[len(b)-1] != tt.last || b[0] != 0.05 {
			t.Errorf("turnBuckets(%s) = %v, want 0.05 … %v", tt.timeout, b, tt.last)
		}
		for i := 1; i < len(b); i++ {
			if b[i] <= b[i-1] {
				t.Errorf("turnBuckets(%s) = %v: not increasing", tt.timeout, b)
			}
		}
	}
}

// TestMetricsStartAtZero: the counters an alert rate()s exist at 0 before
// anything happens, for each of their label values.
func TestMetricsStartAtZero(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	if _, err := newMetrics(reg, nil, time.Minute); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, mf := range mfs {
		got[mf.GetName()] = len(mf.GetMetric())
	}
	for name, want := range map[string]int{"ballet_planner_compactions_total": 2, "ballet_planner_turns_total": 4,
		"ballet_planner_resumes_total": 4, "ballet_planner_turn_duration_seconds": 1, "ballet_planner_model_retries_total": 1} {
		if got[name] != want {
			t.Errorf("%s: %d series at start, want %d", name, got[name], want)
		}
	}
}
