package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"

	"github.com/balletplanner/ballet/store"
)

// TypeEmbed is the asynq task type that embeds one scope's changed texts
// (store.EmbedScope): a project's items and skills, or an organization's
// knowledge entries and skills.
const TypeEmbed = "search:embed"

// TypeEmbedBackfill is the asynq task type that marks every scope for
// embedding, so that the embed tasks bring every vector to the configured
// model.
const TypeEmbedBackfill = "search:backfill"

// QueueEmbed is the queue embedding runs on, before the namespace. It has
// an asynq server of its own on each worker, so that embedding never takes
// a planner turn's slot.
const QueueEmbed = "embed"

// EmbedQueue is the embed queue's name.
func (n Names) EmbedQueue() string { return n.Namespace + QueueEmbed }

// EmbedPayload is the payload of an embed task: the scope to embed.
type EmbedPayload struct {
	Organization string `json:"organization"`
	Project      string `json:"project,omitempty"`
}

// Scope is the store's scope of the payload.
func (p EmbedPayload) Scope() store.EmbedScope {
	return store.EmbedScope{OrganizationID: p.Organization, ProjectID: p.Project}
}

// BackfillPayload is the payload of a backfill task: the embedding model
// whose vectors it brings every scope to.
type BackfillPayload struct {
	Model string `json:"model"`
}

// SearchConfig is the [search] section.
type SearchConfig struct {
	// EmbeddingsModel is the embedding model of the vector leg of search,
	// asked of the gateway's /v1/embeddings; empty turns the vector leg off
	// (search is full-text and trigram only).
	EmbeddingsModel string `toml:"embeddings_model"`
	// EmbedBatch is how many texts one embeddings call carries.
	EmbedBatch int `toml:"embed_batch"`
	// EmbedConcurrency is how many embed tasks one worker runs at once, on
	// an asynq server of their own: embedding never takes a turn's slot.
	EmbedConcurrency int `toml:"embed_concurrency"`
	// EmbedDelay is how long a scope's embed task waits after the first
	// change, so that a burst of edits is embedded by one task.
	EmbedDelay time.Duration `toml:"embed_delay"`
	// EmbedMaxRetry is how often a failing embed task is retried, with
	// exponential backoff, before its scope is marked again for later.
	EmbedMaxRetry int `toml:"embed_max_retry"`
}

// DefaultSearchConfig returns the built-in [search] defaults: no vector
// leg until a model is configured.
func DefaultSearchConfig() SearchConfig {
	return SearchConfig{EmbedBatch: 64, EmbedConcurrency: 2, EmbedDelay: 2 * time.Second, EmbedMaxRetry: 10}
}

// Limits of the [search] keys.
const (
	maxEmbedBatch       = 2048 // the OpenAI embeddings API's cap on inputs per request
	maxEmbedConcurrency = 256
	maxEmbedDelay       = time.Hour
	maxEmbedMaxRetry    = 100
)

// Validate reports the first invalid key of the section.
func (c SearchConfig) Validate() error {
	switch {
	case c.EmbedBatch < 1 || c.EmbedBatch > maxEmbedBatch:
		return fmt.Errorf("search.embed_batch: must be 1-%d, got %d", maxEmbedBatch, c.EmbedBatch)
	case c.EmbedConcurrency < 1 || c.EmbedConcurrency > maxEmbedConcurrency:
		return fmt.Errorf("search.embed_concurrency: must be 1-%d, got %d", maxEmbedConcurrency, c.EmbedConcurrency)
	case c.EmbedDelay < 0 || c.EmbedDelay > maxEmbedDelay:
		return fmt.Errorf("search.embed_delay: must be 0-%s, got %s", maxEmbedDelay, c.EmbedDelay)
	case c.EmbedMaxRetry < 0 || c.EmbedMaxRetry > maxEmbedMaxRetry:
		return fmt.Errorf("search.embed_max_retry: must be 0-%d, got %d", maxEmbedMaxRetry, c.EmbedMaxRetry)
	}
	return nil
}

// embedTimeout is the asynq timeout of one embed or backfill task.
const embedTimeout = 30 * time.Minute

// EmbedTasks enqueues embed and backfill tasks in the embed queue, over a
// Queue's client, with the [search] settings (delay, retries, the
// backfill's model).
type EmbedTasks struct {
	q      *Queue
	search SearchConfig
}

// NewEmbedTasks builds EmbedTasks on q; closing q closes them.
func NewEmbedTasks(q *Queue, c SearchConfig) *EmbedTasks { return &EmbedTasks{q: q, search: c} }

// Names returns the queue's naming.
func (e *EmbedTasks) Names() Names { return e.q.names }

// EmbedTaskID is the task id of a scope's embed task: one per scope at a
// time, so that marks of one scope coalesce into one task.
func EmbedTaskID(s store.EmbedScope) string {
	return "embed:" + s.OrganizationID + ":" + s.ProjectID
}

// BackfillTaskID is the task id of the backfill to model: one at a time
// per model.
func BackfillTaskID(model string) string { return "backfill:" + model }

// EnqueueEmbed puts the scope's embed task in the embed queue, to run after
// the search.embed_delay window. A task of the scope already waiting there
// is the one that will embed it: not an error, it returns false.
func (e *EmbedTasks) EnqueueEmbed(ctx context.Context, s store.EmbedScope) (bool, error) {
	payload, _ := json.Marshal(EmbedPayload{Organization: s.OrganizationID, Project: s.ProjectID})
	task := asynq.NewTask(TypeEmbed, payload, append(e.q.retention(), asynq.TaskID(EmbedTaskID(s)), asynq.Queue(e.q.names.EmbedQueue()),
		asynq.ProcessIn(e.search.EmbedDelay), asynq.MaxRetry(e.search.EmbedMaxRetry), asynq.Timeout(embedTimeout))...)
	ok, err := e.enqueueOnce(ctx, task, EmbedTaskID(s))
	if err != nil {
		return false, fmt.Errorf("tasks: enqueue embed %s: %w", EmbedTaskID(s), err)
	}
	return ok, nil
}

// EnqueueEmbedBackfill puts the backfill task of the configured model in
// the embed queue; one already waiting or running is not an error, it
// returns false.
func (e *EmbedTasks) EnqueueEmbedBackfill(ctx context.Context) (bool, error) {
	model := e.search.EmbeddingsModel
	if model == "" {
		return false, errors.New("tasks: enqueue backfill: search.embeddings_model is not set")
	}
	payload, _ := json.Marshal(BackfillPayload{Model: model})
	id := BackfillTaskID(model)
	task := asynq.NewTask(TypeEmbedBackfill, payload, append(e.q.retention(), asynq.TaskID(id), asynq.Queue(e.q.names.EmbedQueue()),
		asynq.MaxRetry(e.search.EmbedMaxRetry), asynq.Timeout(embedTimeout))...)
	ok, err := e.enqueueOnce(ctx, task, id)
	if err != nil {
		return false, fmt.Errorf("tasks: enqueue backfill %s: %w", id, err)
	}
	return ok, nil
}

// enqueueOnce enqueues task under id; a task holding the id that can still
// run coalesces (false), one archived (it gave up) is replaced.
func (e *EmbedTasks) enqueueOnce(ctx context.Context, task *asynq.Task, id string) (bool, error) {
	for range 2 {
		_, err := e.q.client.EnqueueContext(ctx, task)
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, asynq.ErrTaskIDConflict) {
			return false, err
		}
		info, err := e.q.inspector.GetTaskInfo(e.q.names.EmbedQueue(), id)
		switch {
		case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound):
			continue // done in between: the id is free again
		case err != nil:
			return false, err
		case info.State != asynq.TaskStateArchived && info.State != asynq.TaskStateCompleted:
			return false, nil
		}
		if err := e.q.inspector.DeleteTask(e.q.names.EmbedQueue(), id); err != nil && !errors.Is(err, asynq.ErrTaskNotFound) {
			return false, err
		}
	}
	return false, nil
}

// EmbedQueueInfo counts the embed queue's tasks by state; a queue not
// created yet counts nothing.
func (e *EmbedTasks) QueueInfo() (*asynq.QueueInfo, error) {
	return e.q.QueueInfo(e.q.names.EmbedQueue())
}
