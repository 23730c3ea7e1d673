package api_test

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/balletplanner/ballet/retention"
	"github.com/balletplanner/ballet/store/storetest"
	"github.com/balletplanner/ballet/tasks"
)

// completedTask waits for the task of the queue's Completed tab that
// matches, as the dashboard's api lists it.
func completedTask(t *testing.T, e *env, queue, what string, match func(dashTask) bool) dashTask {
	t.Helper()
	var found dashTask
	storetest.WaitFor(t, what, func() bool {
		for _, task := range e.tasksOf(t, queue, "completed") {
			if match(task) {
				found = task
				return true
			}
		}
		return false
	})
	return found
}

// TestDashboardCompletedTabAndText: with worker.completed_retention, the
// dashboard's Completed tab lists a turn's task with how the turn ended;
// the retention queue's lists its runs with what they did. Every payload
// and result is shown as text: the scheduled retention run's payload is
// JSON, and a run enqueued with the empty payload of earlier versions
// still runs and shows "(empty)", not "non-printable bytes".
func TestDashboardCompletedTabAndText(t *testing.T) {
	t.Parallel()
	e := newDashEnv(t, "loop: true\nanswers:\n  - content: [{text: answered}]\n", tasks.KeepCompleted(time.Minute))
	ctx := context.Background()
	turn := e.send(t, 0, "hello")
	got := completedTask(t, e.env, e.names.Queue(), "the turn's task completed", func(task dashTask) bool {
		return strings.Contains(task.Payload, `"turn":"`+turn+`"`)
	})
	if got.Type != tasks.TypeTurn || got.Result != `{"status":"done","reason":"end_turn"}` {
		t.Errorf("completed turn task %+v, want its result to say how the turn ended", got)
	}

	cfg := retention.DefaultConfig()
	cfg.Interval = time.Second
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	ret, err := retention.New(cfg, retention.Deps{DB: e.db, Redis: e.rdb, Names: e.names, Registry: prometheus.NewRegistry(), Log: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := ret.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ret.Stop)
	old := asynq.NewClientFromRedisClient(e.rdb)
	if _, err := old.Enqueue(asynq.NewTask(retention.TaskType, nil), asynq.Queue(e.names.RetentionQueue()),
		asynq.TaskID("earlier-version"), asynq.MaxRetry(0), asynq.Retention(time.Minute)); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, id, payload string
	}{
		{"the scheduled run", retention.TaskID, `{"every":"1s"}`},
		{"a run of an earlier version", "earlier-version", "(empty)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := completedTask(t, e.env, e.names.RetentionQueue(), tt.name+" completed", func(task dashTask) bool { return task.ID == tt.id })
			if got.Payload != tt.payload {
				t.Errorf("payload shown as %q, want %q", got.Payload, tt.payload)
			}
			if !strings.HasPrefix(got.Result, `{"ran":`) || !strings.Contains(got.Result, `"deleted":{`) {
				t.Errorf("result shown as %q, want what the run did", got.Result)
			}
		})
	}
	// The Schedulers page shows the schedule's payload as text too (the
	// scheduler writes its entries every few seconds).
	var payload any
	storetest.WaitFor(t, "the retention schedule on the Schedulers page", func() bool {
		r := e.do("GET", "/monitoring/api/scheduler_entries", "platform", nil).expect(t, 200)
		for _, x := range r.Body["entries"].([]any) {
			entry := x.(map[string]any)
			for _, o := range entry["options"].([]any) {
				if o == `Queue("`+e.names.RetentionQueue()+`")` {
					payload = entry["task_payload"]
					return true
				}
			}
		}
		return false
	})
	if payload != `{"every":"1s"}` {
		t.Errorf("the schedule's payload is shown as %v", payload)
	}
}
