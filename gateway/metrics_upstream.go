package gateway

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/balletplanner/ballet/gateway/internal/sse"
)

// upstreamMetrics time the gateway's calls to each upstream provider.
type upstreamMetrics struct {
	duration *prometheus.HistogramVec
	ttfb     *prometheus.HistogramVec
}

// upstreamBuckets reach the longest streams a model writes (minutes).
var upstreamBuckets = prometheus.ExponentialBuckets(0.01, 2, 16)

func newUpstreamMetrics() *upstreamMetrics {
	return &upstreamMetrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ballet_llm_upstream_duration_seconds",
			Help:    "One upstream attempt, from sending the request to the end of its answer (a stream's last event), by provider.",
			Buckets: upstreamBuckets}, []string{"provider"}),
		ttfb: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ballet_llm_upstream_ttfb_seconds",
			Help:    "One upstream attempt, from sending the request to its first byte (a stream's first event, else the response headers), by provider.",
			Buckets: upstreamBuckets}, []string{"provider"}),
	}
}

func (m *upstreamMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.duration, m.ttfb}
}

// timing is the server's upstream timings; nil (a Server built bare, in
// tests) observes nothing.
func (s *Server) timing() *upstreamMetrics {
	if s.metrics == nil {
		return nil
	}
	return s.metrics.upstream
}

// firstByte observes an attempt's time to first byte.
func (m *upstreamMetrics) firstByte(provider string, start time.Time) {
	if m == nil {
		return
	}
	m.ttfb.WithLabelValues(provider).Observe(time.Since(start).Seconds())
}

// done observes an attempt's whole duration.
func (m *upstreamMetrics) done(provider string, start time.Time) {
	if m == nil {
		return
	}
	m.duration.WithLabelValues(provider).Observe(time.Since(start).Seconds())
}

// timedSource observes a stream's duration when it ends or is closed,
// whichever comes first.
type timedSource struct {
	eventSource
	m        *upstreamMetrics
	provider string
	start    time.Time
	observed bool // the duration is observed
}

func (m *upstreamMetrics) timed(src eventSource, provider string, start time.Time) eventSource {
	if m == nil {
		return src
	}
	return &timedSource{eventSource: src, m: m, provider: provider, start: start}
}

// end observes the duration once; the relay's goroutine alone reads and
// closes a source.
func (t *timedSource) end() {
	if !t.observed {
		t.observed = true
		t.m.done(t.provider, t.start)
	}
}

func (t *timedSource) next() (sse.Raw, error) {
	ev, err := t.eventSource.next()
	if err != nil {
		t.end()
	}
	return ev, err
}

func (t *timedSource) close() {
	t.end()
	t.eventSource.close()
}
