package dispatch

import (
	"errors"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/balletplanner/ballet/internal/cputime"
)

// Metrics are the dispatcher's Prometheus series. Only the leading
// dispatcher's process sets the per-organization gauges; the others have
// none of them.
type Metrics struct {
	backlog   *prometheus.GaugeVec
	oldest    *prometheus.GaugeVec
	inUse     *prometheus.GaugeVec
	pool      prometheus.Gauge
	leader    prometheus.Gauge
	sent      *prometheus.CounterVec
	takeovers prometheus.Counter
	queueWait *prometheus.HistogramVec
	cpu       *prometheus.CounterVec
	// shown is when each organization last had turns, so that its series
	// stay (at 0) for showIdleFor after, and then go.
	shown map[string]time.Time
}

// showIdleFor is how long an organization with nothing waiting or running
// keeps its series at 0 before they go.
const showIdleFor = 10 * time.Minute

// NewMetrics registers the dispatcher's series on reg (a nil reg registers
// nothing); a registry that has them already shares them.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		shown: map[string]time.Time{},
		backlog: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ballet_planner_backlog_turns",
			Help: "Planner turns ready to run but held back by the scheduler, by organization."}, []string{"organization"}),
		oldest: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ballet_planner_backlog_oldest_seconds",
			Help: "How long the organization's oldest held-back planner turn has waited."}, []string{"organization"}),
		inUse: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ballet_planner_slots_in_use",
			Help: "Worker slots held by the organization's planner turns (dispatched or running)."}, []string{"organization"}),
		pool: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ballet_planner_pool_slots",
			Help: "Worker slots of the pool: worker.concurrency summed over the live workers (leader only)."}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ballet_planner_dispatcher_leader",
			Help: "1 while this process's dispatcher leads, else 0."}),
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ballet_planner_dispatched_total",
			Help: "Planner turns dispatched to the queue, by priority."}, []string{"priority"}),
		takeovers: prometheus.NewCounter(prometheus.CounterOpts{Name: "ballet_planner_dispatch_takeovers_total",
			Help: "Times this process's dispatcher took the lead."}),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ballet_planner_dispatch_wait_seconds",
			Help:    "From a turn becoming ready to its dispatch, by priority.",
			Buckets: []float64{.005, .025, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}}, []string{"priority"}),
		cpu: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ballet_planner_dispatcher_cpu_seconds_total",
			Help: "CPU time of this process's dispatcher goroutines (Linux; 0 elsewhere), by work: enqueue (the tasks' enqueues, which scheduler.mode fifo does in the api and workers) and schedule (the rest)."},
			[]string{"work"}),
	}
	if reg == nil {
		return m, nil
	}
	cs := []prometheus.Collector{m.backlog, m.oldest, m.inUse, m.pool, m.leader, m.sent, m.takeovers, m.queueWait, m.cpu}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return nil, err
			}
			cs[i] = are.ExistingCollector
		}
	}
	m.backlog, m.oldest, m.inUse = cs[0].(*prometheus.GaugeVec), cs[1].(*prometheus.GaugeVec), cs[2].(*prometheus.GaugeVec)
	m.pool, m.leader = cs[3].(prometheus.Gauge), cs[4].(prometheus.Gauge)
	m.sent, m.takeovers = cs[5].(*prometheus.CounterVec), cs[6].(prometheus.Counter)
	m.queueWait, m.cpu = cs[7].(*prometheus.HistogramVec), cs[8].(*prometheus.CounterVec)
	for _, p := range []string{"interactive", "batch"} {
		m.sent.WithLabelValues(p)
	}
	for _, w := range []string{workEnqueue, workSchedule} {
		m.cpu.WithLabelValues(w)
	}
	return m, nil
}

// The dispatcher's work, as ballet_planner_dispatcher_cpu_seconds_total
// labels it.
const (
	workEnqueue  = "enqueue"
	workSchedule = "schedule"
)

// threadMeter adds the CPU time of one goroutine, locked to its OS thread,
// to the dispatcher's CPU counter: all of it to schedule but what enqueue
// measured apart.
type threadMeter struct {
	m    *Metrics
	last time.Duration
}

// meter locks the calling goroutine to its thread and starts measuring it.
func (m *Metrics) meter() *threadMeter {
	runtime.LockOSThread()
	return &threadMeter{m: m, last: cputime.Thread()}
}

// tick counts the thread's CPU since the last tick as schedule work.
func (t *threadMeter) tick() {
	now := cputime.Thread()
	t.m.cpu.WithLabelValues(workSchedule).Add(max(0, now-t.last).Seconds())
	t.last = now
}

// enqueue runs fn, a task's enqueue, counting its CPU as enqueue work.
func (t *threadMeter) enqueue(fn func()) {
	t.tick()
	fn()
	now := cputime.Thread()
	t.m.cpu.WithLabelValues(workEnqueue).Add(max(0, now-t.last).Seconds())
	t.last = now
}

// stop counts the rest and unlocks the thread.
func (t *threadMeter) stop() {
	t.tick()
	runtime.UnlockOSThread()
}

func (m *Metrics) tookLead() {
	m.leader.Set(1)
	m.takeovers.Inc()
}

// lostLead clears the series only a leader sets.
func (m *Metrics) lostLead() {
	m.leader.Set(0)
	m.pool.Set(0)
	m.backlog.Reset()
	m.oldest.Reset()
	m.inUse.Reset()
	clear(m.shown)
}

func priorityName(p int) string {
	if p == batch {
		return "batch"
	}
	return "interactive"
}

// dispatched counts a dispatched turn.
func (m *Metrics) dispatched(it *item, now time.Time) {
	p := priorityName(it.prio)
	m.sent.WithLabelValues(p).Inc()
	if !it.turn.ReadyAt.IsZero() {
		m.queueWait.WithLabelValues(p).Observe(max(0, now.Sub(it.turn.ReadyAt).Seconds()))
	}
}

// show sets the gauges from the tree. An organization gone from it shows
// 0 for showIdleFor, then its series go.
func (m *Metrics) show(t *tree, slots int, now time.Time) {
	m.pool.Set(float64(slots))
	seen := map[string]bool{}
	for _, org := range t.root.children {
		key := org.key
		if key == "" {
			key = org.id
		}
		seen[key] = true
		m.shown[key] = now
		m.backlog.WithLabelValues(key).Set(float64(org.ready[interactive] + org.ready[batch]))
		m.inUse.WithLabelValues(key).Set(float64(org.running))
		m.oldest.WithLabelValues(key).Set(oldestReady(org, now).Seconds())
	}
	for key, at := range m.shown {
		if seen[key] {
			continue
		}
		if now.Sub(at) > showIdleFor {
			delete(m.shown, key)
			m.backlog.DeleteLabelValues(key)
			m.inUse.DeleteLabelValues(key)
			m.oldest.DeleteLabelValues(key)
			continue
		}
		m.backlog.WithLabelValues(key).Set(0)
		m.inUse.WithLabelValues(key).Set(0)
		m.oldest.WithLabelValues(key).Set(0)
	}
}

// oldestReady is how long the subtree's oldest ready turn has waited.
func oldestReady(org *node, now time.Time) time.Duration {
	var oldest time.Duration
	for _, p := range org.children {
		for _, h := range p.children {
			for _, q := range h.queue {
				for _, it := range q {
					if it.gone || it.inflight {
						continue
					}
					oldest = max(oldest, now.Sub(it.turn.ReadyAt))
					break
				}
			}
		}
	}
	return oldest
}
