package tasks_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tasks"
)

// BenchmarkHubFanout publishes text deltas to one session watched by N
// watchers of one hub, one at a time, and reports the latency from publish
// to the last watcher (p50, p99).
func BenchmarkHubFanout(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("watchers=%d", n), func(b *testing.B) {
			e := newHubEnv(b)
			tr := e.startTurn(b)
			got := make(chan time.Time, n)
			for range n {
				w := e.watch(b, e.hub, tr.session, 2)
				go func(w *tasks.Watch) {
					for o := range w.Outputs() {
						if o.Type == store.OutputText {
							got <- time.Now()
						}
					}
				}(w)
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				e.pub.Publish(context.Background(), store.Output{Session: tr.session, Turn: tr.fence.Turn, Type: store.OutputText, Text: "x"})
				var last time.Time
				for range n {
					last = <-got
				}
				lat = append(lat, last.Sub(start))
			}
			b.StopTimer()
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}
