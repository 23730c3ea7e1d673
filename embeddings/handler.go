package embeddings

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/balletplanner/ballet/store"
)

// Embedding, end to end. Triggers in Postgres mark a scope (a project, or
// an organization for its knowledge and organization skills) dirty when a
// searchable text changes, and NOTIFY store.EmbedDirtyChannel at commit.
// The dispatcher (dispatch.go) turns marks into embed tasks, one per
// scope at a time (task id embed:<org>:<project>, run after
// search.embed_delay, so a burst of edits is one task). The embed queue has
// an asynq server of its own (server.go), so embedding never takes a
// planner turn's slot. This file is its handlers.

// embedStore is what the embed handlers need of Postgres; the store
// (*store.DB) provides it.
type embedStore interface {
	TakeEmbedScope(ctx context.Context, s store.EmbedScope) (bool, error)
	IndexEmbedScope(ctx context.Context, e store.Embedder, s store.EmbedScope, batch int) (int, error)
	MarkEmbedScopes(ctx context.Context, scopes ...store.EmbedScope) error
	MarkAllEmbedScopes(ctx context.Context) (int64, error)
}

var _ embedStore = (*store.DB)(nil)

// Results of an embed task, the result label of ballet_search_embed_tasks_total.
const (
	embedOK       = "ok"      // the scope is up to date
	embedError    = "error"   // failed; asynq retries it with backoff
	embedGaveUp   = "gave_up" // the last retry failed; the scope is marked again for later
	embedSkipped  = "skipped" // no embedder for the scope
	embedBackfill = "backfill"
)

// embedMetrics are the embed queue's Prometheus series.
type embedMetrics struct {
	tasks    *prometheus.CounterVec
	embedded prometheus.Counter
}

func newEmbedMetrics(reg prometheus.Registerer) (*embedMetrics, error) {
	m := &embedMetrics{
		tasks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ballet_search_embed_tasks_total",
			Help: "Embed queue tasks run, by result (ok, error, gave_up, skipped, backfill)."}, []string{"result"}),
		embedded: prometheus.NewCounter(prometheus.CounterOpts{Name: "ballet_search_embedded_texts_total",
			Help: "Texts embedded by embed tasks (items, skills, knowledge entries)."}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.tasks, m.embedded} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("embeddings: embed metrics: %w", err)
		}
	}
	return m, nil
}

// embedHandler runs embed and backfill tasks.
type embedHandler struct {
	db        embedStore
	embedders store.Embedders
	batch     int
	log       *slog.Logger
	m         *embedMetrics
	marked    func() // after a backfill marked the scopes: wakes the dispatcher
}

// embed takes the scope's mark, then calls IndexEmbedScope until it finds
// the scope up to date. Each call embeds up to 10,000 stale texts (in
// embeddings calls of search.embed_batch), storing them as it goes: a
// scope of n entities takes ceil(n/10,000) + 1 calls. The whole task runs
// within the embed task's asynq timeout (tasks: 30 minutes); a scope too
// big for it stops there, its stored vectors kept, and the retry goes on
// from them. A failure is returned for asynq to retry with backoff; the
// last retry marks the scope again, so that the dispatcher enqueues it
// later: a failing provider loses no change.
func (h *embedHandler) embed(ctx context.Context, t *asynq.Task) error {
	var p Payload
	if err := json.Unmarshal(t.Payload(), &p); err != nil || p.Organization == "" {
		return fmt.Errorf("embeddings: embed: bad payload %q: %w", t.Payload(), asynq.SkipRetry)
	}
	s := p.Scope()
	log := h.log.With(slog.String("organization", s.OrganizationID), slog.String("project", s.ProjectID))
	start := time.Now()
	if _, err := h.db.TakeEmbedScope(ctx, s); err != nil {
		return h.fail(ctx, log, s, err)
	}
	e := h.embedders(s.OrganizationID, s.ProjectID)
	if e == nil {
		h.m.tasks.WithLabelValues(embedSkipped).Inc()
		return nil
	}
	total := 0
	for {
		n, err := h.db.IndexEmbedScope(ctx, e, s, h.batch)
		total += n
		h.m.embedded.Add(float64(n)) // stored, also before a failure
		if err != nil {
			return h.fail(ctx, log, s, err)
		}
		if n == 0 {
			break
		}
	}
	h.m.tasks.WithLabelValues(embedOK).Inc()
	log.DebugContext(ctx, "scope embedded", slog.Int("texts", total), slog.String("model", e.Model()),
		slog.Duration("took", time.Since(start)))
	return nil
}

// fail returns err for asynq to retry, or, on the last retry, marks the
// scope again and ends the task, so that its id is free for the next one.
// A task cancelled by the worker's shutdown goes back to the queue as it
// is; one past its timeout is a failure like any other.
func (h *embedHandler) fail(ctx context.Context, log *slog.Logger, s store.EmbedScope, err error) error {
	retried, _ := asynq.GetRetryCount(ctx)
	maxRetry, _ := asynq.GetMaxRetry(ctx)
	if !errors.Is(ctx.Err(), context.Canceled) && retried >= maxRetry {
		if merr := h.db.MarkEmbedScopes(context.WithoutCancel(ctx), s); merr != nil {
			h.m.tasks.WithLabelValues(embedError).Inc()
			return fmt.Errorf("embeddings: embed: mark the scope again after %d retries: %w (after %w)", retried, merr, err)
		}
		h.m.tasks.WithLabelValues(embedGaveUp).Inc()
		log.WarnContext(ctx, "embedding failed on every retry; the scope is marked to be tried again later",
			slog.Int("retries", retried), slog.Any("error", err))
		return nil
	}
	h.m.tasks.WithLabelValues(embedError).Inc()
	log.WarnContext(ctx, "embedding failed; retrying with backoff", slog.Int("retry", retried),
		slog.Int("max_retry", maxRetry), slog.Any("error", err))
	return fmt.Errorf("embeddings: embed %s: %w", TaskID(s), err)
}

// backfill marks every organization and project, so that their embed tasks
// bring every vector to the configured model.
func (h *embedHandler) backfill(ctx context.Context, t *asynq.Task) error {
	var p BackfillPayload
	_ = json.Unmarshal(t.Payload(), &p)
	n, err := h.db.MarkAllEmbedScopes(ctx)
	if err != nil {
		h.m.tasks.WithLabelValues(embedError).Inc()
		return fmt.Errorf("embeddings: embed backfill: %w", err)
	}
	h.m.tasks.WithLabelValues(embedBackfill).Inc()
	h.log.InfoContext(ctx, "embedding backfill: every scope marked", slog.Int64("scopes", n), slog.String("model", p.Model))
	if h.marked != nil {
		h.marked()
	}
	return nil
}
