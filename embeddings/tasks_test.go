package embeddings_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/balletplanner/ballet/embeddings"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tasks"
	"github.com/balletplanner/ballet/tasks/taskstest"
)

func TestSearchConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		edit func(*embeddings.SearchConfig)
		want string
	}{
		{"defaults", func(*embeddings.SearchConfig) {}, ""},
		{"a model", func(c *embeddings.SearchConfig) { c.EmbeddingsModel = "text-embedding-3-small" }, ""},
		{"no batch", func(c *embeddings.SearchConfig) { c.EmbedBatch = 0 }, "search.embed_batch: must be 1-2048, got 0"},
		{"batch too large", func(c *embeddings.SearchConfig) { c.EmbedBatch = 2049 }, "search.embed_batch: must be 1-2048, got 2049"},
		{"no concurrency", func(c *embeddings.SearchConfig) { c.EmbedConcurrency = 0 }, "search.embed_concurrency: must be 1-256, got 0"},
		{"negative delay", func(c *embeddings.SearchConfig) { c.EmbedDelay = -time.Second }, "search.embed_delay: must be 0-1h0m0s, got -1s"},
		{"no delay", func(c *embeddings.SearchConfig) { c.EmbedDelay = 0 }, ""},
		{"negative retries", func(c *embeddings.SearchConfig) { c.EmbedMaxRetry = -1 }, "search.embed_max_retry: must be 0-100, got -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := embeddings.DefaultSearchConfig()
			tt.edit(&c)
			err := c.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || err.Error() != tt.want {
				t.Fatalf("error %v, want %q", err, tt.want)
			}
		})
	}
}

// TestEnqueueEmbedCoalesces: a scope's second enqueue while its task waits
// is absorbed by it; a task that was archived is replaced; the task waits
// the embed delay and carries the scope, on the embed queue.
func TestEnqueueEmbedCoalesces(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, rc := taskstest.New(t)
	names := tasks.Names{Namespace: rc.Namespace}
	q := tasks.NewQueue(rdb, names, time.Minute)
	t.Cleanup(q.Close)
	sc := embeddings.DefaultSearchConfig()
	sc.EmbeddingsModel, sc.EmbedDelay, sc.EmbedMaxRetry = "m1", time.Hour, 7
	et := embeddings.NewTasks(q, sc)
	scope := store.EmbedScope{OrganizationID: "o1", ProjectID: "p1"}

	for i, want := range []bool{true, false, false} {
		got, err := et.EnqueueEmbed(ctx, scope)
		if err != nil || got != want {
			t.Fatalf("enqueue %d: %v, %v; want %v", i+1, got, err, want)
		}
	}
	if got, err := et.EnqueueEmbed(ctx, store.EmbedScope{OrganizationID: "o1"}); err != nil || !got {
		t.Fatalf("the organization's scope: %v, %v; want a task of its own", got, err)
	}
	info, err := q.Inspector().GetTaskInfo(names.EmbedQueue(), embeddings.TaskID(scope))
	if err != nil {
		t.Fatal(err)
	}
	var p embeddings.Payload
	if err := json.Unmarshal(info.Payload, &p); err != nil {
		t.Fatal(err)
	}
	if info.Queue != rc.Namespace+"embed" || info.ID != "embed:o1:p1" || info.Type != embeddings.TypeEmbed ||
		info.State != asynq.TaskStateScheduled || info.MaxRetry != 7 || time.Until(info.NextProcessAt) < 59*time.Minute ||
		p.Scope() != scope {
		t.Fatalf("task %+v, payload %+v", info, p)
	}
	if err := q.Inspector().ArchiveTask(names.EmbedQueue(), info.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := et.EnqueueEmbed(ctx, scope); err != nil || !got {
		t.Fatalf("after the task was archived: %v, %v; want a new task", got, err)
	}
	qi, err := et.QueueInfo()
	if err != nil || qi.Scheduled != 2 || qi.Archived != 0 {
		t.Fatalf("queue %+v, %v; want the two scopes' tasks scheduled", qi, err)
	}
}

// TestEnqueueEmbedBackfill: one backfill task per model at a time, and
// none without a model.
func TestEnqueueEmbedBackfill(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, rc := taskstest.New(t)
	q := tasks.NewQueue(rdb, tasks.Names{Namespace: rc.Namespace}, time.Minute)
	t.Cleanup(q.Close)
	sc := embeddings.DefaultSearchConfig()
	if _, err := embeddings.NewTasks(q, sc).EnqueueBackfill(ctx); err == nil || !strings.Contains(err.Error(), "search.embeddings_model is not set") {
		t.Fatalf("without a model: %v", err)
	}
	for _, tc := range []struct {
		model string
		want  bool
	}{{"m1", true}, {"m1", false}, {"m2", true}} {
		sc.EmbeddingsModel = tc.model
		got, err := embeddings.NewTasks(q, sc).EnqueueBackfill(ctx)
		if err != nil || got != tc.want {
			t.Fatalf("backfill %s: %v, %v; want %v", tc.model, got, err, tc.want)
		}
	}
	qi, err := embeddings.NewTasks(q, sc).QueueInfo()
	if err != nil || qi.Pending != 2 {
		t.Fatalf("queue %+v, %v; want one backfill per model", qi, err)
	}
}
