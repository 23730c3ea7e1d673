// Package embeddings keeps the vector leg of search up to date: the embed
// queue's task types and payloads (tasks.go), the dispatcher that turns
// the scopes Postgres marks dirty into embed tasks (dispatch.go), the embed
// queue's own asynq server (server.go) and its handlers (handler.go),
// including the backfill that re-embeds everything after a change of
// search.embeddings_model. The SQL is the store's (store/embed*.go).
package embeddings

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/balletplanner/ballet/internal/startstop"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tasks"
)

// Deps are what the embeddings pipeline needs from its process.
type Deps struct {
	// DB is the store: the dirty marks, the texts and their vectors.
	DB    *store.DB
	Redis redis.UniversalClient
	// Queue is the process's task queue; embed tasks are enqueued on its
	// client, and kept as completed as long as its turns.
	Queue *tasks.Queue
	// Embedders gives the embedder metered to a scope (nil: no
	// embeddings, and the pipeline does nothing).
	Embedders store.Embedders
	// Search is the [search] section; an empty Search.EmbeddingsModel
	// turns the pipeline off.
	Search   SearchConfig
	Registry prometheus.Registerer
	Log      *slog.Logger
}

// Service is the embeddings pipeline of one process: the embed queue's
// asynq server, then the dispatcher, started in that order and stopped in
// reverse. Every worker process runs one, beside the planner queue's
// server: embedding never takes a planner turn's slot. On start it
// enqueues the backfill of the configured model (one at a time per
// model), so that a changed search.embeddings_model re-embeds in the
// background.
type Service struct {
	tasks    *Tasks // nil when off
	log      *slog.Logger
	services *startstop.Group
}

// New builds the pipeline; with no embedders or no
// search.embeddings_model it is off, and Start and Stop do nothing. Its
// counters (ballet_search_embed_tasks_total,
// ballet_search_embedded_texts_total) are registered on d.Registry.
func New(d Deps) (*Service, error) {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	s := &Service{log: d.Log, services: startstop.NewGroup()}
	if d.Embedders == nil || d.Search.EmbeddingsModel == "" {
		return s, nil
	}
	m, err := newEmbedMetrics(d.Registry)
	if err != nil {
		return nil, err
	}
	s.tasks = NewTasks(d.Queue, d.Search)
	dispatcher := newEmbedDispatcher(d.DB, d.DB.ListenEmbedDirty, s.tasks, d.Log)
	h := &embedHandler{db: d.DB, embedders: d.Embedders, batch: d.Search.EmbedBatch, log: d.Log, m: m,
		marked: dispatcher.wake}
	s.services = startstop.NewGroup(
		startstop.Named("embed server", newEmbedServer(d.Redis, d.Queue.Names(), d.Search.EmbedConcurrency, h, d.Log)),
		startstop.Named("embed dispatcher", dispatcher))
	return s, nil
}

// Enabled reports whether the pipeline runs (embedders and a model are
// configured).
func (s *Service) Enabled() bool { return s.tasks != nil }

// Start runs the embed queue's server and the dispatcher, then enqueues
// the backfill of the configured model; a backfill that cannot be enqueued
// is logged, not an error (`ballet search backfill` enqueues it later).
func (s *Service) Start(ctx context.Context) error {
	if s.tasks == nil {
		return nil
	}
	if err := s.services.Start(ctx); err != nil {
		return err
	}
	if _, err := s.tasks.EnqueueBackfill(ctx); err != nil {
		s.log.WarnContext(ctx, "enqueue the embedding backfill; run `ballet search backfill` later", slog.Any("error", err))
	}
	return nil
}

// Stop stops the dispatcher, then the server: an embed task still running
// after the server's grace goes back to the queue. Safe before Start and
// twice.
func (s *Service) Stop() { s.services.Stop() }
