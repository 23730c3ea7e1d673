package promread_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/balletplanner/ballet/internal/promread"
)

func TestCounter(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "x"}, []string{"a", "b"})
	reg.MustRegister(c)
	c.WithLabelValues("1", "p").Add(2)
	c.WithLabelValues("1", "q").Add(3)
	c.WithLabelValues("2", "p").Add(5)
	tests := []struct {
		name   string
		metric string
		labels []string
		want   float64
		found  bool
	}{
		{"all series", "x_total", nil, 10, true},
		{"one label", "x_total", []string{"a", "1"}, 5, true},
		{"two labels", "x_total", []string{"a", "2", "b", "p"}, 5, true},
		{"no series", "x_total", []string{"a", "3"}, 0, false},
		{"no metric", "y_total", nil, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, found, err := promread.Counter(reg, tt.metric, tt.labels...)
			if err != nil || got != tt.want || found != tt.found {
				t.Fatalf("Counter(%s, %v) = %v, %v, %v; want %v, %v", tt.metric, tt.labels, got, found, err, tt.want, tt.found)
			}
		})
	}
	if _, _, err := promread.Counter(reg, "x_total", "a"); err == nil {
		t.Fatal("an odd label list is accepted")
	}
}
