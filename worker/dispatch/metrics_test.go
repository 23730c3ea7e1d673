package dispatch

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/balletplanner/ballet/store"
)

// TestMetricsShowTheTree: the leader's gauges say each organization's
// held-back turns, oldest wait and slots in use; an organization with
// nothing left stays at 0 until showIdleFor has passed, then goes; losing
// the lead clears them.
func TestMetricsShowTheTree(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	tr := newTree(Caps{})
	tr.setSettings(map[string]store.ScopeSettings{"o1": {Key: "acme"}})
	now := time.Now()
	tr.add(store.DispatchTurn{ID: "1", Organization: "o1", Project: "p", Human: "h", ReadyAt: now.Add(-3 * time.Second)}, now)
	tr.add(store.DispatchTurn{ID: "2", Organization: "o1", Project: "p", Human: "h", ReadyAt: now}, now)
	tr.add(store.DispatchTurn{ID: "3", Organization: "o1", Project: "p", Human: "h", Dispatched: true}, now)
	m.tookLead()
	m.show(tr, 10, now)
	for name, want := range map[string]float64{"ballet_planner_backlog_turns": 2, "ballet_planner_slots_in_use": 1,
		"ballet_planner_backlog_oldest_seconds": 3} {
		var g *prometheus.GaugeVec
		switch name {
		case "ballet_planner_backlog_turns":
			g = m.backlog
		case "ballet_planner_slots_in_use":
			g = m.inUse
		default:
			g = m.oldest
		}
		if got := value(t, g.WithLabelValues("acme")); got != want {
			t.Errorf("%s{organization=acme} = %v, want %v", name, got, want)
		}
	}
	if got := value(t, m.pool); got != 10 {
		t.Errorf("pool slots %v, want 10", got)
	}
	for _, id := range []string{"1", "2", "3"} {
		tr.remove(id, now)
	}
	tr.reset(nil, now)
	m.show(tr, 10, now.Add(time.Minute))
	if n := series(t, reg, "ballet_planner_backlog_turns"); n != 1 || value(t, m.backlog.WithLabelValues("acme")) != 0 {
		t.Errorf("an idle organization: %d series, want its one at 0", n)
	}
	m.show(tr, 10, now.Add(showIdleFor+2*time.Minute))
	if n := series(t, reg, "ballet_planner_backlog_turns"); n != 0 {
		t.Errorf("an organization idle for long: %d series, want none", n)
	}
	m.lostLead()
	if got := value(t, m.leader); got != 0 {
		t.Errorf("leader %v after losing the lead", got)
	}
}

// value reads a gauge.
func value(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

// series counts the series of a metric family in reg.
func series(t *testing.T, reg *prometheus.Registry, name string) int {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return len(f.GetMetric())
		}
	}
	return 0
}
