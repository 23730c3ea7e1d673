package embeddings

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tasks"
)

// TypeEmbed is the asynq task type that embeds one scope's changed texts
// (store.EmbedScope): a project's items and skills, or an organization's
// knowledge entries and skills.
const TypeEmbed = "search:embed"

// TypeBackfill is the asynq task type that marks every scope for
// embedding, so that the embed tasks bring every vector to the configured
// model.
const TypeBackfill = "search:backfill"

// Payload is the payload of an embed task: the scope to embed.
type Payload struct {
	Organization string `json:"organization"`
	Project      string `json:"project,omitempty"`
}

// Scope is the store's scope of the payload.
func (p Payload) Scope() store.EmbedScope {
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

// Tasks enqueues embed and backfill tasks in the embed queue, over a
// Queue's client, with the [search] settings (delay, retries, the
// backfill's model).
type Tasks struct {
	q      *tasks.Queue
	search SearchConfig
}

// NewTasks builds Tasks on q; closing q closes them.
func NewTasks(q *tasks.Queue, c SearchConfig) *Tasks { return &Tasks{q: q, search: c} }

// Names returns the queue's naming.
func (e *Tasks) Names() tasks.Names { return e.q.Names() }

// TaskID is the task id of a scope's embed task: one per scope at a
// time, so that marks of one scope coalesce into one task.
func TaskID(s store.EmbedScope) string {
	return "embed:" + s.OrganizationID + ":" + s.ProjectID
}

// BackfillTaskID is the task id of the backfill to model: one at a time
// per model.
func BackfillTaskID(model string) string { return "backfill:" + model }

// EnqueueEmbed puts the scope's embed task in the embed queue, to run after
// the search.embed_delay window. A task of the scope already waiting there
// is the one that will embed it: not an error, it returns false.
func (e *Tasks) EnqueueEmbed(ctx context.Context, s store.EmbedScope) (bool, error) {
	payload, _ := json.Marshal(Payload{Organization: s.OrganizationID, Project: s.ProjectID})
	task := asynq.NewTask(TypeEmbed, payload, append(e.q.KeepOptions(), asynq.TaskID(TaskID(s)), asynq.Queue(e.q.Names().EmbedQueue()),
		asynq.ProcessIn(e.search.EmbedDelay), asynq.MaxRetry(e.search.EmbedMaxRetry), asynq.Timeout(embedTimeout))...)
	ok, err := e.enqueueOnce(ctx, task, TaskID(s))
	if err != nil {
		return false, fmt.Errorf("embeddings: enqueue embed %s: %w", TaskID(s), err)
	}
	return ok, nil
}

// EnqueueBackfill puts the backfill task of the configured model in
// the embed queue; one already waiting or running is not an error, it
// returns false.
func (e *Tasks) EnqueueBackfill(ctx context.Context) (bool, error) {
	model := e.search.EmbeddingsModel
	if model == "" {
		return false, errors.New("embeddings: enqueue backfill: search.embeddings_model is not set")
	}
	payload, _ := json.Marshal(BackfillPayload{Model: model})
	id := BackfillTaskID(model)
	task := asynq.NewTask(TypeBackfill, payload, append(e.q.KeepOptions(), asynq.TaskID(id), asynq.Queue(e.q.Names().EmbedQueue()),
		asynq.MaxRetry(e.search.EmbedMaxRetry), asynq.Timeout(embedTimeout))...)
	ok, err := e.enqueueOnce(ctx, task, id)
	if err != nil {
		return false, fmt.Errorf("embeddings: enqueue backfill %s: %w", id, err)
	}
	return ok, nil
}

// enqueueOnce enqueues task under id; a task holding the id that can still
// run coalesces (false), one archived (it gave up) is replaced.
func (e *Tasks) enqueueOnce(ctx context.Context, task *asynq.Task, id string) (bool, error) {
	for range 2 {
		_, err := e.q.Client().EnqueueContext(ctx, task)
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, asynq.ErrTaskIDConflict) {
			return false, err
		}
		info, err := e.q.Inspector().GetTaskInfo(e.q.Names().EmbedQueue(), id)
		switch {
		case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound):
			continue // done in between: the id is free again
		case err != nil:
			return false, err
		case info.State != asynq.TaskStateArchived && info.State != asynq.TaskStateCompleted:
			return false, nil
		}
		if err := e.q.Inspector().DeleteTask(e.q.Names().EmbedQueue(), id); err != nil && !errors.Is(err, asynq.ErrTaskNotFound) {
			return false, err
		}
	}
	return false, nil
}

// QueueInfo counts the embed queue's tasks by state; a queue not
// created yet counts nothing.
func (e *Tasks) QueueInfo() (*asynq.QueueInfo, error) {
	return e.q.QueueInfo(e.q.Names().EmbedQueue())
}
