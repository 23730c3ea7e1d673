package worker

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/balletplanner/ballet/internal/ttlcache"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tasks"
)

// metrics are the worker's Prometheus series.
type metrics struct {
	turns       *prometheus.CounterVec
	duration    prometheus.Histogram
	queueWait   prometheus.Histogram
	rounds      prometheus.Histogram
	toolCalls   *prometheus.CounterVec
	toolTime    *prometheus.HistogramVec
	running     prometheus.Gauge
	compactions *prometheus.CounterVec
	resumes     *prometheus.CounterVec
	// modelRetries counts model calls made again after no answer.
	modelRetries prometheus.Counter
}

// turnOutcomes, compactionOutcomes and resumeReasons are the label values
// their series start with, at 0.
var (
	turnOutcomes       = []string{"completed", store.ReasonMaxRounds, store.ReasonCancelled, store.ReasonError}
	compactionOutcomes = []string{"ok", "failed"}
	resumeReasons      = []string{store.StaleWorkerLost, store.StaleLeaseExpired, resumeNotQueued, resumeUnclaimed}
)

// turnBuckets double from 50ms up to the turn timeout, the longest a turn
// runs, which is the last bucket.
func turnBuckets(timeout time.Duration) []float64 {
	if timeout <= 0 {
		timeout = DefaultConfig().TurnTimeout
	}
	limit := timeout.Seconds()
	var b []float64
	for v := 0.05; v < limit; v *= 2 {
		b = append(b, v)
	}
	return append(b, limit)
}

func newMetrics(reg prometheus.Registerer, q *tasks.Queue, turnTimeout time.Duration) (*metrics, error) {
	m := &metrics{
		turns: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ballet_planner_turns_total",
			Help: "Planner turns ended, by outcome (completed, max_rounds, cancelled, error)."}, []string{"outcome"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ballet_planner_turn_duration_seconds",
			Help: "Time from a turn's start on a worker to its end; the last bucket is worker.turn_timeout.", Buckets: turnBuckets(turnTimeout)}),
		queueWait: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ballet_planner_queue_wait_seconds",
			Help: "Time from send to a turn's start.", Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14)}),
		rounds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ballet_planner_rounds",
			Help: "Model rounds per turn.", Buckets: []float64{1, 2, 3, 5, 8, 13, 20, 30, 50}}),
		toolCalls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ballet_planner_tool_calls_total",
			Help: "Tool calls, by tool and outcome (ok, error)."}, []string{"tool", "outcome"}),
		toolTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ballet_planner_tool_duration_seconds",
			Help: "Tool call duration.", Buckets: prometheus.ExponentialBuckets(0.0005, 3, 12)}, []string{"tool"}),
		running: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ballet_planner_running_turns",
			Help: "Turns running on this worker."}),
		compactions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ballet_planner_compactions_total",
			Help: "Context compactions, by outcome (ok, failed)."}, []string{"outcome"}),
		resumes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ballet_planner_resumes_total",
			Help: "Turns the sweeper put back in the queue, by reason (worker_lost, lease_expired, not_queued, unclaimed)."},
			[]string{"reason"}),
		modelRetries: prometheus.NewCounter(prometheus.CounterOpts{Name: "ballet_planner_model_retries_total",
			Help: "Model calls that got no answer (the gateway refused the connection or cut the stream) and were made again."}),
	}
	for _, o := range turnOutcomes {
		m.turns.WithLabelValues(o)
	}
	for _, o := range compactionOutcomes {
		m.compactions.WithLabelValues(o)
	}
	for _, r := range resumeReasons {
		m.resumes.WithLabelValues(r)
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.turns, m.duration, m.queueWait, m.rounds, m.toolCalls, m.toolTime,
		m.running, m.compactions, m.resumes, m.modelRetries, queueDepthFor(q)} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) toolCall(tool string, isError bool, took time.Duration) {
	outcome := "ok"
	if isError {
		outcome = "error"
	}
	m.toolCalls.WithLabelValues(tool, outcome).Inc()
	m.toolTime.WithLabelValues(tool).Observe(took.Seconds())
}

// queueDepth reports the planner queue's task counts by state from the asynq
// inspector, cached between scrapes: each lookup runs Lua and MEMORY USAGE.
type queueDepth struct {
	q     *tasks.Queue
	cache *ttlcache.Cache[map[string]float64] // by queue
}

// queueDepthFor is the queueDepth collector of q.
func queueDepthFor(q *tasks.Queue) *queueDepth {
	return &queueDepth{q: q, cache: ttlcache.New[map[string]float64](1, nil)}
}

var queueDepthDesc = prometheus.NewDesc("ballet_planner_queue_depth",
	"Tasks in the planner queue by state (pending, active, scheduled, retry, archived); cached for 5s. "+
		"The queue is shared: every worker reports the same whole count, so aggregate with max(), never sum().",
	[]string{"queue", "state"}, nil)

func (c *queueDepth) Describe(ch chan<- *prometheus.Desc) { ch <- queueDepthDesc }

func (c *queueDepth) Collect(ch chan<- prometheus.Metric) {
	if c.q == nil {
		return
	}
	queue := c.q.Names().Queue()
	// A failed read is kept too, as no figures, for as long as figures
	// would be: a failing Redis is not asked on every scrape.
	depth, _ := c.cache.Load(context.Background(), queue, func(context.Context) (map[string]float64, time.Time, error) {
		depth := map[string]float64{}
		if info, err := c.q.QueueInfo(queue); err == nil {
			depth["pending"] = float64(info.Pending)
			depth["active"] = float64(info.Active)
			depth["scheduled"] = float64(info.Scheduled)
			depth["retry"] = float64(info.Retry)
			depth["archived"] = float64(info.Archived)
		}
		return depth, time.Now().Add(5 * time.Second), nil
	})
	for state, v := range depth {
		ch <- prometheus.MustNewConstMetric(queueDepthDesc, prometheus.GaugeValue, v, queue, state)
	}
}

// outcome is the metrics label of a done reason.
func outcome(reason string) string {
	switch reason {
	case store.ReasonCancelled, store.ReasonMaxRounds, store.ReasonError:
		return reason
	}
	return "completed"
}
