package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Queued turns are counted in planner_queue_counts (per project) and
// planner_queue_total (in all), each split into shards by session, by
// triggers on planner_turns that run as the moving transaction commits
// (migration 00097). A limit check sums one project's shards and the
// total's: its cost does not grow with the queue.

// queuedCountsSQL reads the committed counts of queued turns: the project's
// ($1) and the total.
const queuedCountsSQL = `SELECT
	COALESCE((SELECT sum(queued) FROM planner_queue_counts WHERE project_id = $1), 0)::bigint,
	COALESCE((SELECT sum(queued) FROM planner_queue_total), 0)::bigint`

// queueCounts are the counts of queued turns a limit check reads.
type queueCounts struct {
	project, total int64
}

// limited reports whether any limit is set: when none is, a send reads no
// counter.
func (l QueueLimits) limited() bool {
	return l.PerProject > 0 || l.Total > 0
}

// check refuses a send beyond the limits, given the counts of turns queued.
func (l QueueLimits) check(s Session, c queueCounts) error {
	if l.PerProject > 0 && c.project >= int64(l.PerProject) {
		return Errorf(CodeExhausted, "project %s already has %d queued planner turns (server.max_queued_turns_per_project); wait for some to finish", s.Project, c.project)
	}
	if l.Total > 0 && c.total >= int64(l.Total) {
		return Errorf(CodeExhausted, "the planner queue is full (%d queued turns, server.max_queued_turns); try again shortly", c.total)
	}
	return nil
}

// queueQueuedCounts queues on b the read of the counts into c.
func queueQueuedCounts(b *pgx.Batch, projectID string, c *queueCounts) {
	b.Queue(queuedCountsSQL, projectID).QueryRow(func(row pgx.Row) error {
		return row.Scan(&c.project, &c.total)
	})
}

// QueuedTurns returns the number of turns queued in a project and in all,
// from the counters the limits read.
func (db *DB) QueuedTurns(ctx context.Context, projectID string) (project, total int64, err error) {
	if err := db.pool.QueryRow(ctx, queuedCountsSQL, projectID).Scan(&project, &total); err != nil {
		return 0, 0, fmt.Errorf("store: queued turns: %w", err)
	}
	return project, total, nil
}

// batchQuerier is a Querier that queues each statement on a batch, for a
// caller that reads none of their results: a write helper such as
// AppendEvent then joins the batch instead of taking a round trip of its
// own. Its errors come from the batch's Close.
type batchQuerier struct{ b *pgx.Batch }

// Exec queues sql; its tag is empty.
func (q batchQuerier) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	q.b.Queue(sql, args...)
	return pgconn.CommandTag{}, nil
}

// Query is not supported: its rows would be read before the batch runs.
func (q batchQuerier) Query(context.Context, string, ...any) (pgx.Rows, error) {
	return nil, fmt.Errorf("store: query in a batch: not supported")
}

// QueryRow queues sql; the row it returns scans nothing.
func (q batchQuerier) QueryRow(_ context.Context, sql string, args ...any) pgx.Row {
	q.b.Queue(sql, args...)
	return unreadRow{}
}

// unreadRow is the row of a statement whose result is not read.
type unreadRow struct{}

// Scan leaves dest as it is.
func (unreadRow) Scan(...any) error { return nil }
