package retention

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/balletplanner/ballet/internal/asynqlog"
	"github.com/balletplanner/ballet/tasks"
)

// Timings of the retention queue's asynq server.
const (
	retentionTaskCheck = time.Second     // an idle server polls the retention queue this often
	retentionShutdown  = 5 * time.Second // a running run's grace on Stop; its ctx is cancelled after
)

// retentionServer is the asynq server of the retention queue, beside the
// planner queue's: one slot of its own, so that a run never takes a turn's
// slot. The asynq dashboard shows it as queue <namespace>retention.
type retentionServer struct {
	rdb      redis.UniversalClient
	queue    string
	interval time.Duration
	h        *retentionHandler
	log      *slog.Logger
	srv      *asynq.Server
}

func newRetentionServer(rdb redis.UniversalClient, names tasks.Names, interval time.Duration, h *retentionHandler, log *slog.Logger) *retentionServer {
	return &retentionServer{rdb: rdb, queue: names.RetentionQueue(), interval: interval, h: h, log: log}
}

// Start runs the server's handler for retention tasks.
func (s *retentionServer) Start(ctx context.Context) error {
	if s.srv != nil {
		return nil
	}
	s.srv = asynq.NewServerFromRedisClient(s.rdb, asynq.Config{
		Concurrency:              1,
		Queues:                   map[string]int{s.queue: 1},
		TaskCheckInterval:        retentionTaskCheck,
		DelayedTaskCheckInterval: time.Second,
		ShutdownTimeout:          retentionShutdown,
		// A completed run's task, kept for most of an interval, frees its
		// id soon after: the janitor runs at least once an interval.
		JanitorInterval: min(8*time.Second, max(time.Second, s.interval/4)),
		Logger:          asynqlog.Logger{L: s.log},
		LogLevel:        asynq.WarnLevel,
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc(TaskType, s.h.process)
	if err := s.srv.Start(mux); err != nil {
		s.srv = nil
		return fmt.Errorf("retention: start the retention queue: %w", err)
	}
	return nil
}

// Stop stops taking retention tasks.
func (s *retentionServer) Stop() {
	if s.srv != nil {
		s.srv.Shutdown()
		s.srv = nil
	}
}
