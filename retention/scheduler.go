package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/balletplanner/ballet/internal/asynqlog"
	"github.com/balletplanner/ballet/tasks"
)

// retentionScheduler is asynq's scheduler enqueueing the retention task
// every retention.interval. Every worker runs one; they coalesce on the
// task's id (TaskID), kept for most of an interval after the
// run completes, and the run itself claims its period in Postgres, so that
// there is one run per interval however many workers run.
type retentionScheduler struct {
	rdb       redis.UniversalClient
	queue     string
	interval  time.Duration
	timeout   time.Duration
	log       *slog.Logger
	inspector *asynq.Inspector
	sched     *asynq.Scheduler
}

func newRetentionScheduler(rdb redis.UniversalClient, names tasks.Names, interval, timeout time.Duration, log *slog.Logger) *retentionScheduler {
	return &retentionScheduler{rdb: rdb, queue: names.RetentionQueue(), interval: interval, timeout: timeout, log: log}
}

// retentionKept is how long a completed run's task keeps its id: most of
// an interval, at least a second (asynq counts it in seconds).
func retentionKept(interval time.Duration) time.Duration {
	return max(time.Second, interval*9/10)
}

// Start registers the task and runs the scheduler.
func (s *retentionScheduler) Start(ctx context.Context) error {
	if s.sched != nil {
		return nil
	}
	s.inspector = asynq.NewInspectorFromRedisClient(s.rdb)
	sched := asynq.NewSchedulerFromRedisClient(s.rdb, &asynq.SchedulerOpts{
		Logger:          schedulerLogger{asynqlog.Logger{L: s.log}},
		LogLevel:        asynq.WarnLevel,
		Location:        time.UTC,
		PostEnqueueFunc: s.enqueued,
	})
	payload, err := TaskPayload(s.interval)
	if err != nil {
		return fmt.Errorf("retention: schedule retention: %w", err)
	}
	task := asynq.NewTask(TaskType, payload)
	if _, err := sched.Register(fmt.Sprintf("@every %s", s.interval), task, asynq.Queue(s.queue),
		asynq.TaskID(TaskID), asynq.MaxRetry(0), asynq.Timeout(s.timeout),
		asynq.Retention(retentionKept(s.interval))); err != nil {
		return fmt.Errorf("retention: schedule retention: %w", err)
	}
	if err := sched.Start(); err != nil {
		return fmt.Errorf("retention: start the retention scheduler: %w", err)
	}
	s.sched = sched
	s.log.InfoContext(ctx, "retention scheduled", slog.String("queue", s.queue), slog.Duration("interval", s.interval))
	return nil
}

// enqueued is called after each of the scheduler's enqueues. A conflict on
// the id is another worker's run of this interval: expected. A run that
// asynq archived (its worker died while it ran) would hold the id for
// good: it is deleted, and the next tick enqueues again.
func (s *retentionScheduler) enqueued(_ *asynq.TaskInfo, err error) {
	switch {
	case err == nil:
		return
	case !errors.Is(err, asynq.ErrTaskIDConflict):
		s.log.Warn("enqueue the retention run", slog.Any("error", err))
		return
	}
	info, err := s.inspector.GetTaskInfo(s.queue, TaskID)
	if err != nil || info.State != asynq.TaskStateArchived {
		return
	}
	if err := s.inspector.DeleteTask(s.queue, TaskID); err != nil && !errors.Is(err, asynq.ErrTaskNotFound) {
		s.log.Warn("delete the archived retention run", slog.Any("error", err))
	}
}

// Stop stops the scheduler; the inspector shares the process's Redis
// client, which stays open.
func (s *retentionScheduler) Stop() {
	if s.sched != nil {
		s.sched.Shutdown()
		s.sched = nil
	}
}

// schedulerLogger is asynqlog.Logger without the error a scheduler on a shared
// Redis client logs at every shutdown: the client is the process's, and
// closed by it.
type schedulerLogger struct{ asynqlog.Logger }

func (l schedulerLogger) Error(args ...any) {
	if strings.Contains(fmt.Sprint(args...), "connection is shared") {
		return
	}
	l.Logger.Error(args...)
}
