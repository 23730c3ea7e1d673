package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Dependency types of SPEC §3.
const (
	// DependencyBlocks makes the target wait until the source is done or
	// cancelled; all blocks edges of a project form a DAG.
	DependencyBlocks = "blocks"
	// DependencyRelates is informational.
	DependencyRelates = "relates"
)

var dependencyTypes = []string{DependencyBlocks, DependencyRelates}

// Dependency is an edge between two items of one project; From and To are keys.
type Dependency struct {
	ID        string    `json:"id"`
	Type      string    `json:"type"`
	From      string    `json:"from"`
	To        string    `json:"to"`
	CreatedBy string    `json:"created_by"`
	CreatedAt time.Time `json:"created_at"`

	ProjectID      string `json:"-"`
	OrganizationID string `json:"-"`
}

// dependencySelect selects what scanDependency reads.
const dependencySelect = `
SELECT d.id, d.type, f.key, t.key, d.created_by, d.created_at, d.project_id, p.organization_id
FROM dependencies d
JOIN items f ON f.id = d.from_item_id
JOIN items t ON t.id = d.to_item_id
JOIN projects p ON p.id = d.project_id`

func scanDependency(row pgx.Row) (Dependency, error) {
	var d Dependency
	err := row.Scan(&d.ID, &d.Type, &d.From, &d.To, &d.CreatedBy, &d.CreatedAt, &d.ProjectID, &d.OrganizationID)
	return d, err
}

// AddDependency adds the edge "from <type> to" (e.g. WEB-1 blocks WEB-2)
// between two items of one project (tracker.write). Self-links, edges to
// another project, duplicates and blocks cycles are invalid_argument; a cycle
// error names the cycle.
func (db *DB) AddDependency(ctx context.Context, caller Caller, from, to, typ string) (Dependency, error) {
	var d Dependency
	err := db.Tx(ctx, func(tx pgx.Tx) error {
		it, err := itemForCaller(ctx, tx, caller, from, PermTrackerWrite)
		if err != nil {
			return err
		}
		w := &trackerTx{tx: tx, actor: caller.Actor,
			project: Project{ID: it.ProjectID, OrganizationID: it.OrganizationID, Key: it.Project}}
		if err := w.lockDependencies(ctx); err != nil {
			return err
		}
		d, err = w.addDependency(ctx, from, to, typ, "item", "item")
		return err
	})
	if err != nil {
		return Dependency{}, fmt.Errorf("store: add dependency: %w", err)
	}
	return d, nil
}

// itemForCaller loads the item key and checks perm on it. An item of a
// project the caller cannot read is answered exactly like an unknown key,
// so that linking to it tells nothing of what another project holds.
func itemForCaller(ctx context.Context, q Querier, caller Caller, key string, perm Permission) (Item, error) {
	it, err := itemByKey(ctx, q, key, false)
	if err != nil {
		return Item{}, err
	}
	if !caller.Principal.Can(PermTrackerRead, it.OrganizationID, it.ProjectID) {
		return Item{}, Errorf(CodeNotFound, "item %s not found", key)
	}
	if err := caller.Authorize(perm, it.OrganizationID, it.ProjectID); err != nil {
		return Item{}, err
	}
	return it, nil
}

// ListDependencies lists the edges from and to an item, oldest first
// (tracker.read).
func (db *DB) ListDependencies(ctx context.Context, caller Caller, key string) ([]Dependency, error) {
	it, err := itemForCaller(ctx, db.pool, caller, key, PermTrackerRead)
	if err != nil {
		return nil, fmt.Errorf("store: list dependencies: %w", err)
	}
	rows, err := db.pool.Query(ctx, dependencySelect+`
		WHERE d.from_item_id = $1 OR d.to_item_id = $1 ORDER BY d.created_at, d.id`, it.ID)
	if err != nil {
		return nil, fmt.Errorf("store: list dependencies: %w", err)
	}
	deps, err := collect(rows, scanDependency)
	if err != nil {
		return nil, fmt.Errorf("store: list dependencies: %w", err)
	}
	if deps == nil {
		deps = []Dependency{}
	}
	return deps, nil
}

// DeleteDependency removes an edge by id (tracker.write).
func (db *DB) DeleteDependency(ctx context.Context, caller Caller, id string) error {
	if _, err := uuid.Parse(id); err != nil {
		return fmt.Errorf("store: delete dependency: %w", Errorf(CodeNotFound, "dependency %s not found", id))
	}
	err := db.Tx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, dependencySelect+` WHERE d.id = $1 FOR UPDATE OF d`, id)
		if err != nil {
			return err
		}
		d, err := collectOne(rows, scanDependency)
		if err != nil {
			return notFound(err, "dependency %s", id)
		}
		if !caller.Principal.Can(PermTrackerRead, d.OrganizationID, d.ProjectID) {
			return Errorf(CodeNotFound, "dependency %s not found", id)
		}
		if err := caller.Authorize(PermTrackerWrite, d.OrganizationID, d.ProjectID); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM dependencies WHERE id = $1`, id); err != nil {
			return err
		}
		w := &trackerTx{tx: tx, actor: caller.Actor, project: Project{ID: d.ProjectID, OrganizationID: d.OrganizationID}}
		return w.event(ctx, "dependency.removed", "dependency", d.ID, d.From,
			map[string]any{"id": d.ID, "type": d.Type, "from": d.From, "to": d.To})
	})
	if err != nil {
		return fmt.Errorf("store: delete dependency: %w", err)
	}
	return nil
}

// Runnable lists the project's tickets in ready whose blockers are all done
// or cancelled, in key order (tracker.read).
func (db *DB) Runnable(ctx context.Context, caller Caller, projectKey string) ([]Item, error) {
	p, err := db.projectForCaller(ctx, caller, projectKey, PermTrackerRead)
	if err != nil {
		return nil, fmt.Errorf("store: runnable: %w", err)
	}
	rows, err := db.pool.Query(ctx, itemSelect+`
		WHERE i.project_id = $1 AND i.kind = 'ticket' AND i.state = 'ready'
		  AND NOT EXISTS (
		      SELECT 1 FROM dependencies d JOIN items b ON b.id = d.from_item_id
		      WHERE d.project_id = i.project_id AND d.to_item_id = i.id AND d.type = 'blocks'
		        AND b.state NOT IN ('done', 'cancelled'))
		ORDER BY i.number`, p.ID)
	if err != nil {
		return nil, fmt.Errorf("store: runnable: %w", err)
	}
	items, err := collectItems(rows)
	if err != nil {
		return nil, fmt.Errorf("store: runnable: %w", err)
	}
	return items, nil
}

// lockDependencies serializes the dependency writes of the project until the
// transaction ends, so that two concurrent inserts cannot close a cycle that
// neither sees alone.
func (w *trackerTx) lockDependencies(ctx context.Context) error {
	_, err := w.tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('ballet.dependencies:' || $1::text, 0))`,
		w.project.ID)
	if err != nil {
		return fmt.Errorf("lock dependencies: %w", err)
	}
	return nil
}

// addDependency inserts an edge; the caller holds lockDependencies. The
// field names are the ends' names in messages ("from"/"item" over REST,
// "dependency.from"/"dependency.to" in a changeset).
func (w *trackerTx) addDependency(ctx context.Context, from, to, typ, fromField, field string) (Dependency, error) {
	if err := checkEnum("type", typ, dependencyTypes); err != nil {
		return Dependency{}, err
	}
	if from == to {
		return Dependency{}, Errorf(CodeInvalid, "%s: an item cannot depend on itself (%s)", field, from)
	}
	var fromID, toID string
	for _, end := range []struct {
		field, key string
		id         *string
	}{{fromField, from, &fromID}, {field, to, &toID}} {
		err := w.tx.QueryRow(ctx, `SELECT id FROM items WHERE project_id = $1 AND key = $2`,
			w.project.ID, end.key).Scan(end.id)
		if errors.Is(err, pgx.ErrNoRows) {
			return Dependency{}, Errorf(CodeInvalid, "%s: no item %s in project %s (dependencies stay within one project)",
				end.field, end.key, w.project.Key)
		}
		if err != nil {
			return Dependency{}, err
		}
	}
	var dup bool
	err := w.tx.QueryRow(ctx, `
		SELECT EXISTS (SELECT 1 FROM dependencies WHERE type = $3 AND
		    ((from_item_id = $1 AND to_item_id = $2) OR ($3 = 'relates' AND from_item_id = $2 AND to_item_id = $1)))`,
		fromID, toID, typ).Scan(&dup)
	if err != nil {
		return Dependency{}, err
	}
	if dup {
		return Dependency{}, Errorf(CodeAlreadyExists, "dependency %s %s %s already exists", from, typ, to)
	}
	if typ == DependencyBlocks {
		if err := w.checkAcyclic(ctx, from, fromID, to, toID); err != nil {
			return Dependency{}, err
		}
	}
	d := Dependency{Type: typ, From: from, To: to, CreatedBy: w.actor.Subject,
		ProjectID: w.project.ID, OrganizationID: w.project.OrganizationID}
	err = w.tx.QueryRow(ctx, `
		INSERT INTO dependencies (project_id, from_item_id, to_item_id, type, created_by)
		VALUES ($1, $2, $3, $4, $5) RETURNING id, created_at`,
		w.project.ID, fromID, toID, typ, d.CreatedBy).Scan(&d.ID, &d.CreatedAt)
	if isUniqueViolation(err, "") {
		return Dependency{}, Errorf(CodeAlreadyExists, "dependency %s %s %s already exists", from, typ, to)
	}
	if err != nil {
		return Dependency{}, err
	}
	return d, w.event(ctx, "dependency.added", "dependency", d.ID, from,
		map[string]any{"id": d.ID, "type": typ, "from": from, "to": to})
}

// checkAcyclic refuses from→to when to already reaches from over blocks
// edges, naming the cycle it would close.
func (w *trackerTx) checkAcyclic(ctx context.Context, from, fromID, to, toID string) error {
	var cyclic bool
	err := w.tx.QueryRow(ctx, `
		WITH RECURSIVE reach(id) AS (
		    SELECT $1::uuid
		    UNION
		    SELECT d.to_item_id FROM reach r
		    JOIN dependencies d ON d.from_item_id = r.id AND d.type = 'blocks'
		)
		SELECT EXISTS (SELECT 1 FROM reach WHERE id = $2::uuid)`, toID, fromID).Scan(&cyclic)
	if err != nil || !cyclic {
		return err
	}
	// Rare path: load the project's blocks edges to name the cycle.
	rows, err := w.tx.Query(ctx, `
		SELECT f.key, t.key FROM dependencies d
		JOIN items f ON f.id = d.from_item_id JOIN items t ON t.id = d.to_item_id
		WHERE d.project_id = $1 AND d.type = 'blocks'`, w.project.ID)
	if err != nil {
		return err
	}
	next := map[string][]string{}
	var a, b string
	_, err = pgx.ForEachRow(rows, []any{&a, &b}, func() error {
		next[a] = append(next[a], b)
		return nil
	})
	if err != nil {
		return err
	}
	path := shortestPath(next, to, from)
	cycle := append([]string{from}, path...)
	return &Error{Code: CodeInvalid,
		Message: "dependency cycle: " + strings.Join(cycle, " → "),
		Details: map[string]any{"cycle": cycle}}
}

// shortestPath finds a path start→…→goal by breadth-first search.
func shortestPath(next map[string][]string, start, goal string) []string {
	prev := map[string]string{start: ""}
	queue := []string{start}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		if n == goal {
			break
		}
		for _, m := range next[n] {
			if _, seen := prev[m]; !seen {
				prev[m] = n
				queue = append(queue, m)
			}
		}
	}
	var path []string
	for n := goal; n != ""; n = prev[n] {
		path = append([]string{n}, path...)
	}
	return path
}
