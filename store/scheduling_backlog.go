package store

import (
	"context"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"
)

// BacklogCounts are the open turns of an organization or a project by
// where they stand in fair scheduling.
type BacklogCounts struct {
	// Ready turns are their session's next and wait for the dispatcher to
	// give them a worker slot: held back by the scheduler.
	Ready int64 `json:"ready"`
	// Waiting turns are queued behind another open turn of their session.
	Waiting int64 `json:"waiting"`
	// InFlight turns are dispatched (their task is in the queue or
	// running) and not ended.
	InFlight int64 `json:"in_flight"`
	// Running turns are being run by a worker.
	Running int64 `json:"running"`
	// OldestReadySeconds is how long the oldest ready turn has waited for
	// dispatch; 0 when none waits.
	OldestReadySeconds float64 `json:"oldest_ready_seconds"`
}

// BacklogProject is one project's share of the backlog.
type BacklogProject struct {
	Key    string `json:"key"`
	Weight int    `json:"weight"`
	BacklogCounts
}

// BacklogOrganization is one organization's share of the backlog: the sums
// of its projects, and the projects with open turns.
type BacklogOrganization struct {
	Key    string `json:"key"`
	Weight int    `json:"weight"`
	BacklogCounts
	Projects []BacklogProject `json:"projects"`
}

// Backlog is the planner's open turns per organization and project, by
// organization key then project key; only those with open turns are listed.
type Backlog struct {
	Items []BacklogOrganization `json:"items"`
}

// backlogByProject counts the open turns of each project that has any
// (planner_turns_open_idx finds them), with its organization's key and
// weight. An open turn is queued or running, so each counts somewhere: a
// project without a non-zero count has no row.
const backlogByProject = `SELECT o.key, o.scheduling_weight, p.key, p.scheduling_weight,
		count(*) FILTER (WHERE t.ready_at IS NOT NULL AND t.enqueued_at IS NULL),
		count(*) FILTER (WHERE t.ready_at IS NULL AND t.status = 'queued'),
		count(*) FILTER (WHERE t.enqueued_at IS NOT NULL),
		count(*) FILTER (WHERE t.status = 'running'),
		COALESCE(extract(epoch FROM now() - min(t.ready_at) FILTER (WHERE t.ready_at IS NOT NULL AND t.enqueued_at IS NULL)), 0)::float8
	FROM planner_turns t
	JOIN projects p ON p.id = t.project_id
	JOIN organizations o ON o.id = p.organization_id
	WHERE t.finished_at IS NULL
	GROUP BY o.id, p.id
	ORDER BY o.key, p.key`

// PlannerBacklog reports the planner's open turns per organization and
// project: held back (ready), behind their session's open turn (waiting),
// dispatched (in flight) and running, with each one's weight. Only a
// platform admin may read it.
func (db *DB) PlannerBacklog(ctx context.Context, caller Caller) (Backlog, error) {
	if err := authorizePlatformAdmin(caller, "read the planner backlog"); err != nil {
		return Backlog{}, fmt.Errorf("store: planner backlog: %w", err)
	}
	rows, err := db.pool.Query(ctx, backlogByProject)
	if err != nil {
		return Backlog{}, fmt.Errorf("store: planner backlog: %w", err)
	}
	all, err := collect(rows, scanBacklogRow)
	if err != nil {
		return Backlog{}, fmt.Errorf("store: planner backlog: %w", err)
	}
	b := Backlog{Items: []BacklogOrganization{}}
	for _, x := range all {
		if n := len(b.Items); n == 0 || b.Items[n-1].Key != x.org {
			b.Items = append(b.Items, BacklogOrganization{Key: x.org, Weight: x.orgWeight, Projects: []BacklogProject{}})
		}
		o := &b.Items[len(b.Items)-1]
		o.Projects = append(o.Projects, BacklogProject{Key: x.project, Weight: x.projectWeight, BacklogCounts: x.BacklogCounts})
		o.Ready += x.Ready
		o.Waiting += x.Waiting
		o.InFlight += x.InFlight
		o.Running += x.Running
		o.OldestReadySeconds = max(o.OldestReadySeconds, x.OldestReadySeconds)
	}
	return b, nil
}

// backlogRow is one project's line of the backlog, with its organization.
type backlogRow struct {
	org, project             string
	orgWeight, projectWeight int
	BacklogCounts
}

func scanBacklogRow(r pgx.Row) (backlogRow, error) {
	var x backlogRow
	err := r.Scan(&x.org, &x.orgWeight, &x.project, &x.projectWeight,
		&x.Ready, &x.Waiting, &x.InFlight, &x.Running, &x.OldestReadySeconds)
	x.OldestReadySeconds = math.Round(x.OldestReadySeconds*1000) / 1000
	return x, err
}
