package tasks_test

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/balletplanner/ballet/embeddings"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
	"github.com/balletplanner/ballet/tasks"
	"github.com/balletplanner/ballet/tasks/taskstest"
)

// TestKeepCompleted: with KeepCompleted, asynq keeps a turn task that
// completed (the dashboard's Completed tab) and embed tasks carry the same
// retention; a turn enqueued again under a kept task's id replaces it, and
// Exists does not count it. Without, a completed task is gone.
func TestKeepCompleted(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		kept time.Duration
	}{
		{"kept a minute", time.Minute},
		{"not kept", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			rdb, rc := taskstest.New(t)
			names := tasks.Names{Namespace: rc.Namespace}
			q := tasks.NewQueue(rdb, names, time.Minute, tasks.KeepCompleted(tt.kept))
			t.Cleanup(q.Close)
			if q.KeptCompleted() != tt.kept {
				t.Fatalf("KeptCompleted %s", q.KeptCompleted())
			}
			srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{Queues: map[string]int{names.Queue(): 1},
				Concurrency: 1, LogLevel: asynq.FatalLevel, TaskCheckInterval: 10 * time.Millisecond})
			mux := asynq.NewServeMux()
			mux.HandleFunc(tasks.TypeTurn, func(context.Context, *asynq.Task) error { return nil })
			if err := srv.Start(mux); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(srv.Shutdown)
			completed := func(id string) {
				t.Helper()
				if err := q.Enqueue(ctx, "s1", id, id); err != nil {
					t.Fatal(err)
				}
				storetest.WaitFor(t, "the task completed", func() bool {
					info, err := q.Inspector().GetTaskInfo(names.Queue(), id)
					if tt.kept == 0 {
						return err != nil
					}
					return err == nil && info.State == asynq.TaskStateCompleted
				})
			}
			completed("turn-1")
			if there, err := q.Exists("turn-1"); err != nil || there {
				t.Fatalf("Exists of a completed task: %v, %v", there, err)
			}
			if tt.kept > 0 {
				completed("turn-2")
				srv.Stop() // no more processing: the next enqueue stays pending
				if err := q.Enqueue(ctx, "s1", "turn-2", "turn-2"); err != nil {
					t.Fatal(err)
				}
				info, err := q.Inspector().GetTaskInfo(names.Queue(), "turn-2")
				if err != nil || info.State != asynq.TaskStatePending || info.Retention != tt.kept {
					t.Fatalf("enqueued again over the kept task: %+v, %v; want it pending, kept %s", info, err, tt.kept)
				}
			}
			et := embeddings.NewTasks(q, embeddings.DefaultSearchConfig())
			scope := store.EmbedScope{OrganizationID: "o", ProjectID: "p"}
			if _, err := et.EnqueueEmbed(ctx, scope); err != nil {
				t.Fatal(err)
			}
			info, err := q.Inspector().GetTaskInfo(names.EmbedQueue(), embeddings.TaskID(scope))
			if err != nil || info.Retention != tt.kept {
				t.Fatalf("embed task %+v, %v: want it kept %s", info, err, tt.kept)
			}
		})
	}
}
