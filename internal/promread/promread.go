// Package promread reads values back from a Prometheus registry: the
// benchmarks' and tests' view of what a process exports.
package promread

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Counter is the value of counter name in g: the sum over its series whose
// labels include every pair of labels (name, value, name, value …); found
// is false when no series matches.
func Counter(g prometheus.Gatherer, name string, labels ...string) (sum float64, found bool, err error) {
	if len(labels)%2 != 0 {
		return 0, false, fmt.Errorf("promread: %s: labels come in pairs, got %d strings", name, len(labels))
	}
	families, err := g.Gather()
	if err != nil {
		return 0, false, fmt.Errorf("promread: gather: %w", err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			match := true
			for i := 0; i < len(labels); i += 2 {
				if v, ok := have[labels[i]]; !ok || v != labels[i+1] {
					match = false
				}
			}
			if match {
				sum += m.GetCounter().GetValue()
				found = true
			}
		}
	}
	return sum, found, nil
}
