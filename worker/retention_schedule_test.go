package worker_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/balletplanner/ballet/store/storetest"
	"github.com/balletplanner/ballet/tasks"
	"github.com/balletplanner/ballet/tasks/taskstest"
	"github.com/balletplanner/ballet/worker"
)

// retentionLog is a log sink several goroutines write to.
type retentionLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *retentionLog) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// runs are the periods of the "retention run" lines logged so far.
func (b *retentionLog) runs(t *testing.T) []string {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var periods []string
	sc := bufio.NewScanner(bytes.NewReader(b.buf.Bytes()))
	for sc.Scan() {
		var line struct {
			Msg    string `json:"msg"`
			Period string `json:"period"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		if line.Msg == "retention run" {
			periods = append(periods, line.Period)
		}
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
	cfg := worker.DefaultRetentionConfig()
	cfg.Interval = time.Second
	logs := &retentionLog{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var all []*worker.Retention
	for range 3 {
		r, err := worker.NewRetention(cfg, worker.RetentionDeps{DB: db, Redis: rdb, Names: names,
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
