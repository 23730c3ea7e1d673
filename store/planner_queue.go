package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Queued turns are counted in planner_queue_counts (per project),
// planner_queue_org_counts (per organization, migration 00106) and
// planner_queue_total (in all), each split into shards by session, by
// triggers on planner_turns that run as the moving transaction commits
// (migration 00097). A limit check sums one project's shards, its
// organization's and the total's in one statement: its cost does not grow
// with the queue.
//
// Admission is fair across organizations. Each has a cap of its own
// (QueueLimits.PerOrganization, overridden by organizations.max_queued_turns)
// and a share of the global cap: once the total has reached
// QueueLimits.Total, a send is refused only if its organization already has
// at least Total × weight / Σ weight queued turns, the sum taken over the
// organizations with queued turns and the sender's own
// (organizations.scheduling_weight). An organization under its share is
// admitted although the pool is full, so the total may exceed Total, by at
// most the sum of the shares while the same organizations queue (each
// organization that starts queueing while the pool is full adds its share
// at that moment). The weights are read only on that path.

// queuedCountsSQL reads the committed counts of queued turns a limit check
// needs: the project's ($1), the organization's ($2) and the total, and the
// organization's key and its own cap (NULL: the configured default).
const queuedCountsSQL = `SELECT
	COALESCE((SELECT sum(queued) FROM planner_queue_counts WHERE project_id = $1), 0)::bigint,
	COALESCE((SELECT sum(queued) FROM planner_queue_org_counts WHERE organization_id = $2), 0)::bigint,
	COALESCE((SELECT sum(queued) FROM planner_queue_total), 0)::bigint,
	COALESCE(o.key, ''), o.max_queued_turns
	FROM (VALUES (1)) one LEFT JOIN organizations o ON o.id = $2`

// queueSharesSQL reads what an organization's ($1) share of a full queue
// needs: the sum of the scheduling weights of the organizations with queued
// turns and of $1, and the weight of $1.
const queueSharesSQL = `SELECT COALESCE(sum(o.scheduling_weight), 0)::bigint,
	COALESCE(max(o.scheduling_weight) FILTER (WHERE o.id = $1), 1)::bigint
	FROM organizations o
	WHERE o.id = $1 OR o.id IN (SELECT organization_id FROM planner_queue_org_counts
		GROUP BY organization_id HAVING sum(queued) > 0)`

// queueCounts are what a limit check reads: the counts of queued turns and
// the sender's organization.
type queueCounts struct {
	project, organization, total int64
	// orgKey names the organization in a refusal.
	orgKey string
	// orgCap is organizations.max_queued_turns: nil for the configured
	// default, 0 for no cap.
	orgCap *int
}

// limited reports whether any limit is set: when none is, a send reads no
// counter, and an organization's own cap is not applied either.
func (l QueueLimits) limited() bool {
	return l.PerProject > 0 || l.Total > 0 || l.PerOrganization > 0
}

// organizationCap is the cap on the organization's queued turns: its own if
// set, else PerOrganization; 0 is none.
func (l QueueLimits) organizationCap(c queueCounts) int {
	if c.orgCap != nil {
		return *c.orgCap
	}
	return l.PerOrganization
}

// check refuses a send beyond the limits, given the counts of turns queued.
// When the total is at or over Total it reads the organizations' weights
// on q, for the organization's share.
func (l QueueLimits) check(ctx context.Context, q Querier, s Session, c queueCounts) error {
	if l.PerProject > 0 && c.project >= int64(l.PerProject) {
		return Errorf(CodeExhausted, "project %s already has %d queued planner turns (server.max_queued_turns_per_project); wait for some to finish", s.Project, c.project)
	}
	if limit := l.organizationCap(c); limit > 0 && c.organization >= int64(limit) {
		key := "server.max_queued_turns_per_organization"
		if c.orgCap != nil {
			key = "the organization's max_queued_turns"
		}
		return Errorf(CodeExhausted, "organization %s already has %d queued planner turns (%s); wait for some to finish", c.orgKey, c.organization, key)
	}
	if l.Total <= 0 || c.total < int64(l.Total) {
		return nil
	}
	var weights, weight int64
	if err := q.QueryRow(ctx, queueSharesSQL, s.OrganizationID).Scan(&weights, &weight); err != nil {
		return fmt.Errorf("queue share: %w", err)
	}
	// The share is Total × weight / weights; compared without dividing.
	if weights > 0 && c.organization*weights >= int64(l.Total)*weight {
		return Errorf(CodeExhausted, "the planner queue is full (%d queued turns, server.max_queued_turns); try again shortly (organization %s already has %d queued turns, at least its share of %s: scheduling weight %d of %d)",
			c.total, c.orgKey, c.organization, formatShare(int64(l.Total)*weight, weights), weight, weights)
	}
	return nil
}

// formatShare writes num / den as a whole number, or with one decimal.
func formatShare(num, den int64) string {
	if num%den == 0 {
		return fmt.Sprintf("%d", num/den)
	}
	return fmt.Sprintf("%.1f", float64(num)/float64(den))
}

// queueQueuedCounts queues on b the read of the counts of the session's
// project and organization into c.
func queueQueuedCounts(b *pgx.Batch, s Session, c *queueCounts) {
	b.Queue(queuedCountsSQL, s.ProjectID, s.OrganizationID).QueryRow(func(row pgx.Row) error {
		return scanQueueCounts(row, c)
	})
}

func scanQueueCounts(row pgx.Row, c *queueCounts) error {
	return row.Scan(&c.project, &c.organization, &c.total, &c.orgKey, &c.orgCap)
}

// QueuedTurns returns the number of turns queued in a project and in all,
// from the counters the limits read.
func (db *DB) QueuedTurns(ctx context.Context, projectID string) (project, total int64, err error) {
	if err := db.pool.QueryRow(ctx, `SELECT
		COALESCE((SELECT sum(queued) FROM planner_queue_counts WHERE project_id = $1), 0)::bigint,
		COALESCE((SELECT sum(queued) FROM planner_queue_total), 0)::bigint`, projectID).Scan(&project, &total); err != nil {
		return 0, 0, fmt.Errorf("store: queued turns: %w", err)
	}
	return project, total, nil
}

// QueuedTurnsInOrganization returns the number of turns queued in an
// organization, from the counter the limits read.
func (db *DB) QueuedTurnsInOrganization(ctx context.Context, organizationID string) (int64, error) {
	var n int64
	if err := db.pool.QueryRow(ctx, `SELECT COALESCE(sum(queued), 0)::bigint FROM planner_queue_org_counts
		WHERE organization_id = $1`, organizationID).Scan(&n); err != nil {
		return 0, fmt.Errorf("store: queued turns in organization: %w", err)
	}
	return n, nil
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
