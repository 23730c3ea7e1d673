package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Changeset statuses of SPEC §4.
const (
	ChangesetProposed = "proposed"
	ChangesetApplied  = "applied"
	ChangesetRejected = "rejected"
)

var changesetStatuses = []string{ChangesetProposed, ChangesetApplied, ChangesetRejected}

// Operation result statuses.
const (
	ResultApplied = "applied"
	ResultSkipped = "skipped"
)

// Changeset is a proposed set of tracker changes that a human applies (all
// or some operations) or rejects.
type Changeset struct {
	ID         string      `json:"id"`
	Project    string      `json:"project"`
	Title      string      `json:"title"`
	Summary    string      `json:"summary"`
	Status     string      `json:"status"`
	Operations []Operation `json:"operations"`
	// Results has one entry per operation once applied.
	Results []OperationResult `json:"results"`
	// AppliedOperations are the chosen indexes once applied.
	AppliedOperations []int      `json:"applied_operations"`
	ProposedBy        Actor      `json:"proposed_by"`
	SessionID         string     `json:"session_id,omitempty"`
	DecidedBy         string     `json:"decided_by,omitempty"`
	DecidedAt         *time.Time `json:"decided_at,omitempty"`
	CreatedAt         time.Time  `json:"created_at"`
	UpdatedAt         time.Time  `json:"updated_at"`

	ProjectID      string `json:"-"`
	OrganizationID string `json:"-"`
}

// OperationResult is what one operation did when its changeset was applied.
type OperationResult struct {
	Operation int    `json:"operation"`
	Kind      string `json:"kind"`
	// Status is applied, or skipped for an operation not chosen.
	Status string `json:"status"`
	// Item is the key created or updated.
	Item string `json:"item,omitempty"`
	Ref  string `json:"ref,omitempty"`
	// Version is the item's version after the operation.
	Version int64 `json:"version,omitempty"`
	// Dependency is the id of the dependency added.
	Dependency string `json:"dependency,omitempty"`
}

// changesetSelect selects what scanChangeset reads.
const changesetSelect = `
SELECT c.id, c.project_id, p.organization_id, p.key, c.title, c.summary, c.status, c.operations,
       c.results, c.applied_operations, c.proposed_by_kind, c.proposed_by,
       COALESCE(c.proposed_acting_for, ''), COALESCE(c.session_id::text, ''), COALESCE(c.decided_by, ''),
       c.decided_at, c.created_at, c.updated_at
FROM changesets c JOIN projects p ON p.id = c.project_id`

func scanChangeset(row pgx.Row) (Changeset, error) {
	var cs Changeset
	var ops, results, applied []byte
	err := row.Scan(&cs.ID, &cs.ProjectID, &cs.OrganizationID, &cs.Project, &cs.Title, &cs.Summary, &cs.Status,
		&ops, &results, &applied, &cs.ProposedBy.Kind, &cs.ProposedBy.Subject, &cs.ProposedBy.ActingFor,
		&cs.SessionID, &cs.DecidedBy, &cs.DecidedAt, &cs.CreatedAt, &cs.UpdatedAt)
	if err != nil {
		return cs, err
	}
	for _, f := range []struct {
		raw []byte
		dst any
	}{{ops, &cs.Operations}, {results, &cs.Results}, {applied, &cs.AppliedOperations}} {
		if f.raw != nil {
			if err := json.Unmarshal(f.raw, f.dst); err != nil {
				return cs, fmt.Errorf("decode changeset %s: %w", cs.ID, err)
			}
		}
	}
	return cs, nil
}

// changesetDecisionColumns are the columns a decision (apply, reject)
// writes, which scanDecision reads back into the changeset.
const changesetDecisionColumns = `status, decided_by, decided_at, updated_at`

func (cs *Changeset) scanDecision(row pgx.Row) error {
	return row.Scan(&cs.Status, &cs.DecidedBy, &cs.DecidedAt, &cs.UpdatedAt)
}

// changesetByID loads a changeset; forUpdate locks its row.
func changesetByID(ctx context.Context, q Querier, id string, forUpdate bool) (Changeset, error) {
	if _, err := uuid.Parse(id); err != nil {
		return Changeset{}, Errorf(CodeNotFound, "changeset %s not found", id)
	}
	sql := changesetSelect + ` WHERE c.id = $1`
	if forUpdate {
		sql += ` FOR UPDATE OF c`
	}
	rows, err := q.Query(ctx, sql, id)
	if err != nil {
		return Changeset{}, err
	}
	cs, err := collectOne(rows, scanChangeset)
	if err != nil {
		return Changeset{}, notFound(err, "changeset %s", id)
	}
	return cs, nil
}

// ProposeChangeset validates p as if it were applied to the project now and
// stores it as proposed (tracker.write). It runs every operation in a
// savepoint that it then rolls back, so proposal and apply share one rule
// set; a failure names the operation's index. Each update_item records the
// version of the item it was proposed against. Only a human may set a policy.
func (db *DB) ProposeChangeset(ctx context.Context, caller Caller, projectKey string, p Proposal) (Changeset, error) {
	proj, err := db.projectForCaller(ctx, caller, projectKey, PermTrackerWrite)
	if err != nil {
		return Changeset{}, fmt.Errorf("store: propose changeset: %w", err)
	}
	if err := p.Validate(); err != nil {
		return Changeset{}, fmt.Errorf("store: propose changeset: %w", err)
	}
	if caller.Actor.Kind != ActorHuman {
		if err := p.CheckNoPolicy(); err != nil {
			return Changeset{}, fmt.Errorf("store: propose changeset: %w", err)
		}
	}
	ops, err := cloneOperations(p.Operations)
	if err != nil {
		return Changeset{}, fmt.Errorf("store: propose changeset: %w", err)
	}
	session := p.SessionID
	if s, ok := strings.CutPrefix(caller.Actor.Subject, "planner:"); ok && session == "" && caller.Actor.Kind == ActorService {
		if _, err := uuid.Parse(s); err == nil {
			session = s
		}
	}
	cs := Changeset{Project: proj.Key, ProjectID: proj.ID, OrganizationID: proj.OrganizationID, Title: p.Title,
		Summary: p.Summary, Status: ChangesetProposed, Operations: ops, ProposedBy: caller.Actor, SessionID: session}
	err = db.Tx(ctx, func(tx pgx.Tx) error {
		if err := trialRun(ctx, tx, caller.Actor, proj, ops); err != nil {
			return err
		}
		err := tx.QueryRow(ctx, `
			INSERT INTO changesets (project_id, title, summary, operations, proposed_by_kind, proposed_by,
			                        proposed_acting_for, session_id)
			VALUES ($1, $2, $3, $4, $5, $6, NULLIF($7, ''), NULLIF($8, '')::uuid)
			RETURNING id, created_at, updated_at`,
			proj.ID, p.Title, p.Summary, ops, caller.Actor.Kind, caller.Actor.Subject, caller.Actor.ActingFor, session).
			Scan(&cs.ID, &cs.CreatedAt, &cs.UpdatedAt)
		if err != nil {
			return err
		}
		w := &trackerTx{tx: tx, actor: caller.Actor, project: proj}
		if err := w.event(ctx, "changeset.proposed", "changeset", cs.ID, "",
			map[string]any{"id": cs.ID, "title": cs.Title, "operations": len(ops)}); err != nil {
			return err
		}
		return p.Then.run(ctx, tx, cs)
	})
	if err != nil {
		return Changeset{}, fmt.Errorf("store: propose changeset: %w", err)
	}
	return cs, nil
}

// trialRun runs ops in a savepoint and rolls it back, recording in ops the
// versions the updates were proposed against.
func trialRun(ctx context.Context, tx pgx.Tx, actor Actor, proj Project, ops []Operation) error {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return err
	}
	defer sp.Rollback(ctx) //nolint:errcheck // rolled back on purpose
	run := &changesetRun{w: &trackerTx{tx: sp, actor: actor, project: proj}, refs: map[string]string{}}
	if err := run.w.lockDependencies(ctx); err != nil {
		return err
	}
	for i := range ops {
		if _, err := run.run(ctx, i, &ops[i], true); err != nil {
			return err
		}
	}
	return sp.Rollback(ctx)
}

func cloneOperations(ops []Operation) ([]Operation, error) {
	b, err := json.Marshal(ops)
	if err != nil {
		return nil, err
	}
	var out []Operation
	return out, json.Unmarshal(b, &out)
}

// ListChangesets lists a project's changesets, newest first, optionally of
// one status (tracker.read).
func (db *DB) ListChangesets(ctx context.Context, caller Caller, projectKey, status string) ([]Changeset, error) {
	p, err := db.projectForCaller(ctx, caller, projectKey, PermTrackerRead)
	if err != nil {
		return nil, fmt.Errorf("store: list changesets: %w", err)
	}
	if status != "" {
		if err := checkEnum("status", status, changesetStatuses); err != nil {
			return nil, fmt.Errorf("store: list changesets: %w", err)
		}
	}
	rows, err := db.pool.Query(ctx, changesetSelect+`
		WHERE c.project_id = $1 AND ($2 = '' OR c.status = $2) ORDER BY c.created_at DESC, c.id
		LIMIT $3`, p.ID, status, MaxChangesetList)
	if err != nil {
		return nil, fmt.Errorf("store: list changesets: %w", err)
	}
	out, err := collect(rows, scanChangeset)
	if err != nil {
		return nil, fmt.Errorf("store: list changesets: %w", err)
	}
	if out == nil {
		out = []Changeset{}
	}
	return out, nil
}

// MaxChangesetList caps a list of changesets, newest first.
const MaxChangesetList = 200

// GetChangeset returns a changeset by id (tracker.read).
func (db *DB) GetChangeset(ctx context.Context, caller Caller, id string) (Changeset, error) {
	cs, err := changesetByID(ctx, db.pool, id, false)
	if err == nil {
		err = caller.Authorize(PermTrackerRead, cs.OrganizationID, cs.ProjectID)
	}
	if err != nil {
		return Changeset{}, fmt.Errorf("store: get changeset: %w", err)
	}
	return cs, nil
}

// RejectChangeset marks a proposed changeset rejected (tracker.write, a
// human only); a decided one is a conflict. reason goes to the event.
func (db *DB) RejectChangeset(ctx context.Context, caller Caller, id, reason string) (Changeset, error) {
	if utf8.RuneCountInString(reason) > MaxChangesetSummaryLen {
		return Changeset{}, fmt.Errorf("store: reject changeset: %w",
			Errorf(CodeInvalid, "reason: must be at most %d characters", MaxChangesetSummaryLen))
	}
	var cs Changeset
	err := db.Tx(ctx, func(tx pgx.Tx) error {
		var err error
		if cs, err = lockForDecision(ctx, tx, caller, id, "reject"); err != nil {
			return err
		}
		err = cs.scanDecision(tx.QueryRow(ctx, `
			UPDATE changesets SET status = 'rejected', decided_by = $2, decided_at = now(), updated_at = now()
			WHERE id = $1 RETURNING `+changesetDecisionColumns, id, caller.Actor.Subject))
		if err != nil {
			return err
		}
		w := &trackerTx{tx: tx, actor: caller.Actor,
			project: Project{ID: cs.ProjectID, OrganizationID: cs.OrganizationID, Key: cs.Project}}
		payload := map[string]any{"id": cs.ID, "title": cs.Title}
		if reason != "" {
			payload["reason"] = reason
		}
		return w.event(ctx, "changeset.rejected", "changeset", cs.ID, "", payload)
	})
	if err != nil {
		return Changeset{}, fmt.Errorf("store: reject changeset: %w", err)
	}
	return cs, nil
}

// lockForDecision locks a changeset for apply or reject and checks that the
// caller is a human with tracker.write and that it is still proposed.
func lockForDecision(ctx context.Context, tx pgx.Tx, caller Caller, id, verb string) (Changeset, error) {
	cs, err := changesetByID(ctx, tx, id, true)
	if err != nil {
		return Changeset{}, err
	}
	if err := caller.Authorize(PermTrackerWrite, cs.OrganizationID, cs.ProjectID); err != nil {
		return Changeset{}, err
	}
	if caller.Actor.Kind != ActorHuman {
		return Changeset{}, Errorf(CodeForbidden, "only a human may %s a changeset", verb)
	}
	if cs.Status != ChangesetProposed {
		return Changeset{}, &Error{Code: CodeConflict,
			Message: fmt.Sprintf("changeset %s is already %s", cs.ID, cs.Status),
			Details: map[string]any{"status": cs.Status}}
	}
	return cs, nil
}
