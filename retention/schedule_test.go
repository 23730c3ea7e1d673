package retention_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/balletplanner/ballet/internal/logtest"
	"github.com/balletplanner/ballet/retention"
	"github.com/balletplanner/ballet/store/storetest"
	"github.com/balletplanner/ballet/tasks"
	"github.com/balletplanner/ballet/tasks/taskstest"
)

// retentionLog is a log sink several goroutines write to.
type retentionLog struct{ logtest.Buffer }

// runs are the periods of the "retention run" lines logged so far.
func (b *retentionLog) runs(t *testing.T) []string {
	t.Helper()
	var periods []string
	for _, rec := range b.Find(t, "retention run", nil) {
		p, _ := rec["period"].(string)
		periods = append(periods, p)
	}
	return periods
}

// TestRetentionOneRunPerIntervalAcrossWorkers: three workers' retention,
// each with asynq's scheduler, on one Redis namespace and one database,
// run retention once per interval between them, never twice in one.
func TestRetentionOneRunPerIntervalAcrossWorkers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	rdb, rc := taskstest.New(t)
	names := tasks.Names{Namespace: rc.Namespace}
	cfg := retention.DefaultConfig()
	cfg.Interval = time.Second
	logs := &retentionLog{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var all []*retention.Service
	for range 3 {
		r, err := retention.New(cfg, retention.Deps{DB: db, Redis: rdb, Names: names,
			Registry: prometheus.NewRegistry(), Log: log})
		must(t, err)
		must(t, r.Start(ctx))
		all = append(all, r)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		var wg sync.WaitGroup
		for _, r := range all {
			wg.Go(r.Stop)
		}
		wg.Wait()
	}
	t.Cleanup(stop)
	storetest.WaitForWithin(t, 30*time.Second, "three retention runs", func() bool { return len(logs.runs(t)) >= 3 })
	stop()
	seen := map[string]bool{}
	for _, p := range logs.runs(t) {
		if seen[p] {
			t.Errorf("two runs of period %s: %v", p, logs.runs(t))
		}
		seen[p] = true
	}
}
