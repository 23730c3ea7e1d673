package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/hibiken/asynq"
	"github.com/spf13/cobra"

	"github.com/balletplanner/ballet/embeddings"
)

func newSearchCmd() *cobra.Command {
	var path string
	var wait bool
	var timeout time.Duration
	backfill := &cobra.Command{
		Use:   "backfill",
		Short: "enqueue re-embedding of everything missing, changed or of another model",
		Long: "Enqueues the backfill task of search.embeddings_model: a worker marks every\n" +
			"organization and project dirty and the embed queue re-embeds what is missing,\n" +
			"changed or of another model. Prints the counts; with --wait, waits until every\n" +
			"scope is embedded and prints them again.",
		Example: "  ballet search backfill --wait --timeout 1h",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSearch(cmd.Context(), "backfill", path, wait, timeout, cmd.OutOrStdout())
		},
	}
	addConfigFlag(backfill, &path)
	backfill.Flags().BoolVar(&wait, "wait", false, "wait until the embed queue has embedded every scope, then print the counts again")
	backfill.Flags().DurationVar(&timeout, "timeout", 30*time.Minute, "with --wait: how long to wait")
	var statusPath string
	status := &cobra.Command{
		Use:   "status",
		Short: "print the embeddings model, pgvector, the vector counts and the embed queue's tasks",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSearch(cmd.Context(), "status", statusPath, false, 0, cmd.OutOrStdout())
		},
	}
	addConfigFlag(status, &statusPath)
	return newGroupCmd("search", "embeddings of the vector search leg: backfill, status", backfill, status)
}

// runSearch is `ballet search backfill|status`: the embeddings of the
// vector leg of search.
func runSearch(ctx context.Context, action, path string, wait bool, timeout time.Duration, out io.Writer) error {
	cfg, err := LoadConfig(configPath(path), os.Environ())
	if err != nil {
		return err
	}
	if cfg.Search.EmbeddingsModel == "" {
		return errors.New("search: search.embeddings_model is empty: search is full-text and trigram only (no vector leg), there is nothing to embed")
	}
	cfg.Log.Level = "warn"
	rt, err := setup(ctx, cfg, "search")
	if err != nil {
		return err
	}
	defer rt.close()
	et := embeddings.NewTasks(rt.queue(), cfg.Search)
	if action == "status" {
		return searchStatus(ctx, rt, et, out)
	}
	return searchBackfill(ctx, rt, et, out, wait, timeout)
}

// searchBackfill enqueues the backfill task of the configured model: a
// worker marks every organization and project dirty, and the embed queue
// re-embeds what is missing, changed or of another model.
func searchBackfill(ctx context.Context, rt *runtime, et *embeddings.Tasks, out io.Writer, wait bool, timeout time.Duration) error {
	model := rt.cfg.Search.EmbeddingsModel
	enqueued, err := et.EnqueueBackfill(ctx)
	if err != nil {
		return err
	}
	if enqueued {
		fmt.Fprintf(out, "search backfill: enqueued task %s on queue %s; a worker marks every organization and project for embedding with %s\n",
			embeddings.BackfillTaskID(model), et.Names().EmbedQueue(), model)
	} else {
		fmt.Fprintf(out, "search backfill: task %s is already waiting on queue %s; it marks every organization and project for embedding with %s\n",
			embeddings.BackfillTaskID(model), et.Names().EmbedQueue(), model)
	}
	if err := printCounts(ctx, rt, out); err != nil {
		return err
	}
	if !wait {
		return nil
	}
	deadline := time.Now().Add(timeout)
	for {
		idle, err := embedIdle(ctx, rt, et)
		if err != nil {
			return err
		}
		if idle {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("search backfill: not done after %s (is a worker running with search.embeddings_model = %q?)", timeout, model)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	fmt.Fprintln(out, "search backfill: done")
	return printCounts(ctx, rt, out)
}

// embedIdle reports that the backfill task ran (it is gone, or kept as
// completed: worker.completed_retention), no scope is dirty and the embed
// queue holds no task that can still run.
func embedIdle(ctx context.Context, rt *runtime, et *embeddings.Tasks) (bool, error) {
	info0, err := rt.queue().Inspector().GetTaskInfo(et.Names().EmbedQueue(), embeddings.BackfillTaskID(rt.cfg.Search.EmbeddingsModel))
	switch {
	case err == nil && info0.State != asynq.TaskStateCompleted: // a completed one is kept for the dashboard
		return false, nil
	case err == nil:
	case !errors.Is(err, asynq.ErrTaskNotFound) && !errors.Is(err, asynq.ErrQueueNotFound):
		return false, fmt.Errorf("search backfill: look up the backfill task: %w", err)
	}
	dirty, err := rt.db.DirtyEmbedScopes(ctx, 1)
	if err != nil || len(dirty) > 0 {
		return false, err
	}
	info, err := et.QueueInfo()
	if err != nil {
		return false, err
	}
	return info.Pending+info.Active+info.Scheduled+info.Retry == 0, nil
}

// printCounts prints the stored vectors of the configured model and of
// others.
func printCounts(ctx context.Context, rt *runtime, out io.Writer) error {
	current, other, err := rt.db.EmbeddingCounts(ctx, rt.cfg.Search.EmbeddingsModel)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "vectors: %d of %s, %d of other models\n", current, rt.cfg.Search.EmbeddingsModel, other)
	return nil
}

// dirtyShown caps the dirty scopes `search status` counts.
const dirtyShown = 1000

// searchStatus prints the model, pgvector, the vector counts, the dirty
// scopes and the embed queue.
func searchStatus(ctx context.Context, rt *runtime, et *embeddings.Tasks, out io.Writer) error {
	ext, err := rt.db.VectorExtension(ctx)
	if err != nil {
		return err
	}
	if ext == "" {
		ext = "not installed (vectors are ranked by a brute-force scan in Go)"
	} else {
		ext += " (installed; vectors are still ranked by a brute-force scan in Go)"
	}
	fmt.Fprintf(out, "embeddings model: %s\npgvector: %s\n", rt.cfg.Search.EmbeddingsModel, ext)
	if err := printCounts(ctx, rt, out); err != nil {
		return err
	}
	dirty, err := rt.db.DirtyEmbedScopes(ctx, dirtyShown+1)
	if err != nil {
		return err
	}
	n := fmt.Sprint(len(dirty))
	if len(dirty) > dirtyShown {
		n = fmt.Sprintf("more than %d", dirtyShown)
	}
	fmt.Fprintf(out, "scopes waiting to be embedded: %s\n", n)
	info, err := et.QueueInfo()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "queue %s: %d pending, %d scheduled, %d active, %d retry, %d archived\n",
		et.Names().EmbedQueue(), info.Pending, info.Scheduled, info.Active, info.Retry, info.Archived)
	return nil
}
