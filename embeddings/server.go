package embeddings

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/balletplanner/ballet/internal/asynqlog"
	"github.com/balletplanner/ballet/tasks"
)

// Timings of the embed queue's asynq server.
const (
	embedTaskCheck     = 250 * time.Millisecond // an idle server polls the embed queue this often
	embedShutdown      = 5 * time.Second        // a running embed task's grace on Stop; asynq requeues it after
	embedRetryBase     = time.Second
	embedRetryMaxDelay = 5 * time.Minute
)

// embedServer is the asynq server of the embed queue, beside the planner
// queue's: search.embed_concurrency slots of its own, so that embedding
// never takes a turn's slot nor starves turns. The asynq dashboard shows it
// as queue <namespace>embed.
type embedServer struct {
	rdb         redis.UniversalClient
	queue       string
	concurrency int
	h           *embedHandler
	log         *slog.Logger
	srv         *asynq.Server
}

func newEmbedServer(rdb redis.UniversalClient, names tasks.Names, concurrency int, h *embedHandler, log *slog.Logger) *embedServer {
	return &embedServer{rdb: rdb, queue: names.EmbedQueue(), concurrency: concurrency, h: h, log: log}
}

// Start runs the server's handlers for embed and backfill tasks.
func (s *embedServer) Start(ctx context.Context) error {
	if s.srv != nil {
		return nil
	}
	s.srv = asynq.NewServerFromRedisClient(s.rdb, asynq.Config{
		Concurrency:              s.concurrency,
		Queues:                   map[string]int{s.queue: 1},
		TaskCheckInterval:        embedTaskCheck,
		DelayedTaskCheckInterval: time.Second,
		ShutdownTimeout:          embedShutdown,
		RetryDelayFunc:           embedRetryDelay,
		Logger:                   asynqlog.Logger{L: s.log},
		LogLevel:                 asynq.WarnLevel,
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc(TypeEmbed, s.h.embed)
	mux.HandleFunc(TypeBackfill, s.h.backfill)
	if err := s.srv.Start(mux); err != nil {
		s.srv = nil
		return fmt.Errorf("embeddings: start the embed queue: %w", err)
	}
	s.log.InfoContext(ctx, "embed queue started", slog.String("queue", s.queue), slog.Int("concurrency", s.concurrency))
	return nil
}

// Stop stops taking embed tasks; one still running after embedShutdown
// goes back to the queue.
func (s *embedServer) Stop() {
	if s.srv != nil {
		s.srv.Shutdown()
		s.srv = nil
	}
}

// embedRetryDelay is the backoff of a failing embed task: doubling from
// embedRetryBase up to embedRetryMaxDelay, with ±50% jitter so that the
// tasks of many scopes do not retry a recovering provider all at once.
func embedRetryDelay(n int, _ error, _ *asynq.Task) time.Duration {
	d := min(embedRetryBase<<min(n, 20), embedRetryMaxDelay)
	return d/2 + rand.N(d)
}
