package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/balletplanner/ballet/retention"
)

func newRetentionCmd() *cobra.Command {
	var path string
	run := &cobra.Command{
		Use:   "run",
		Short: "delete now what the [retention] windows no longer keep",
		Long: "Runs retention now, as a worker's scheduled run does (planner outputs of ended\n" +
			"turns, usage detail rolled up by day, the event log), whatever this period's\n" +
			"scheduled run did; it waits for no one: while another run holds the lock it\n" +
			"exits 1. It needs Postgres only, and prints what it deleted.",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runRetention(cmd.Context(), path, cmd.OutOrStdout())
		},
	}
	addConfigFlag(run, &path)
	return newGroupCmd("retention", "run retention on demand (run)", run)
}

// errRetentionBusy is what `ballet retention run` says while another run
// holds the lock.
var errRetentionBusy = errors.New("retention run: another run holds the lock (a worker's scheduled run); try again once it ends")

// runRetention is `ballet retention run`.
func runRetention(ctx context.Context, path string, out io.Writer) error {
	db, cfg, err := openStore(ctx, path)
	if err != nil {
		return err
	}
	defer db.Close()
	r := cfg.Retention
	if !r.Enabled() {
		fmt.Fprintln(out, "retention run: every window is 0 (keep forever): nothing to delete")
		return nil
	}
	rep, err := retention.Run(ctx, r, db, slog.New(slog.DiscardHandler))
	if err != nil {
		return fmt.Errorf("retention run: %w", err)
	}
	if !rep.Ran {
		return errRetentionBusy
	}
	fmt.Fprintf(out, "retention run: %d planner outputs deleted (%s), %d usage rows rolled up by day (%s), %d events deleted (%s)\n",
		rep.Deleted[retention.Outputs], retentionWindow(r.Outputs),
		rep.Deleted[retention.Usage], retentionWindow(r.UsageDetail),
		rep.Deleted[retention.Events], retentionWindow(r.Events))
	return nil
}

// retentionWindow says what a window deletes: "older than 30d", "older
// than 36h0m0s", or "kept forever" for 0.
func retentionWindow(d time.Duration) string {
	const day = 24 * time.Hour
	switch {
	case d <= 0:
		return "kept forever"
	case d%day == 0:
		return fmt.Sprintf("older than %dd", d/day)
	}
	return "older than " + d.String()
}
