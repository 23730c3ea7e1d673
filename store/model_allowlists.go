package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Bounds of a model allow-list.
const (
	maxAllowedModels   = 1000
	maxAllowedModelLen = 128
)

// ModelAllowlist is the models the LLM gateway lets a scope's calls use:
// an organization's (ProjectID empty), which binds its projects too, or a
// project's. An empty Models allows every model.
type ModelAllowlist struct {
	OrganizationID string    `json:"organization_id"`
	ProjectID      string    `json:"project_id,omitempty"`
	Models         []string  `json:"models"`
	UpdatedBy      string    `json:"updated_by"`
	UpdatedAt      time.Time `json:"updated_at"`
}

// PutModelAllowlist creates or replaces the allow-list stored at
// organization scope (ProjectID empty) or project scope. Names are kept
// once each, in the order given.
func (db *DB) PutModelAllowlist(ctx context.Context, a ModelAllowlist) (ModelAllowlist, error) {
	if len(a.Models) > maxAllowedModels {
		return ModelAllowlist{}, Errorf(CodeInvalid, "models: at most %d, got %d", maxAllowedModels, len(a.Models))
	}
	models := make([]string, 0, len(a.Models))
	for i, m := range a.Models {
		if m == "" || len(m) > maxAllowedModelLen || strings.ContainsFunc(m, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
			return ModelAllowlist{}, Errorf(CodeInvalid, "models[%d]: must be a model name of 1-%d characters without spaces, got %q", i, maxAllowedModelLen, m)
		}
		if !slices.Contains(models, m) {
			models = append(models, m)
		}
	}
	row := db.pool.QueryRow(ctx, `
INSERT INTO model_allowlists AS a (organization_id, project_id, models, updated_by)
SELECT $1::uuid, NULLIF($2, '')::uuid, $3, $4
WHERE $2 = '' OR EXISTS (SELECT 1 FROM projects WHERE id = NULLIF($2, '')::uuid AND organization_id = $1::uuid)
ON CONFLICT ON CONSTRAINT model_allowlists_scope DO UPDATE SET
    models = EXCLUDED.models, updated_by = EXCLUDED.updated_by, updated_at = now()
RETURNING `+allowlistColumns, a.OrganizationID, a.ProjectID, models, a.UpdatedBy)
	out, err := scanAllowlist(row)
	if err != nil {
		return ModelAllowlist{}, fmt.Errorf("store: put model allow-list: %w",
			notFound(err, "project %s of organization %s", a.ProjectID, a.OrganizationID))
	}
	return out, nil
}

// GetModelAllowlist returns the allow-list stored exactly at the scope given.
func (db *DB) GetModelAllowlist(ctx context.Context, organizationID, projectID string) (ModelAllowlist, error) {
	row := db.pool.QueryRow(ctx, `SELECT `+allowlistColumns+` FROM model_allowlists
WHERE organization_id = $1::uuid AND project_id IS NOT DISTINCT FROM NULLIF($2, '')::uuid`, organizationID, projectID)
	a, err := scanAllowlist(row)
	if err != nil {
		return ModelAllowlist{}, fmt.Errorf("store: get model allow-list: %w", notFound(err, "model allow-list"))
	}
	return a, nil
}

// DeleteModelAllowlist removes the allow-list stored exactly at the scope given.
func (db *DB) DeleteModelAllowlist(ctx context.Context, organizationID, projectID string) error {
	tag, err := db.pool.Exec(ctx, `DELETE FROM model_allowlists
WHERE organization_id = $1::uuid AND project_id IS NOT DISTINCT FROM NULLIF($2, '')::uuid`, organizationID, projectID)
	if err != nil {
		return fmt.Errorf("store: delete model allow-list: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("store: delete model allow-list: %w", Errorf(CodeNotFound, "model allow-list not found"))
	}
	return nil
}

// ModelRule is the allow-lists in force at a scope: the organization's and,
// for a project, its own. A call's model must be in each non-empty one, so
// a project narrows its organization's list and never widens it.
type ModelRule struct {
	Organization []string // nil: every model
	Project      []string // nil: every model
}

// Allows reports whether the rule lets a call use model.
func (r ModelRule) Allows(model string) bool {
	return (len(r.Organization) == 0 || slices.Contains(r.Organization, model)) &&
		(len(r.Project) == 0 || slices.Contains(r.Project, model))
}

// Restricted reports whether any list is in force.
func (r ModelRule) Restricted() bool { return len(r.Organization) > 0 || len(r.Project) > 0 }

// EffectiveModelRule reads the allow-lists in force at a scope.
func (db *DB) EffectiveModelRule(ctx context.Context, organizationID, projectID string) (ModelRule, error) {
	rows, err := db.pool.Query(ctx, `SELECT project_id IS NULL, models FROM model_allowlists
WHERE organization_id = $1::uuid AND (project_id IS NULL OR project_id = NULLIF($2, '')::uuid)`, organizationID, projectID)
	if err != nil {
		return ModelRule{}, fmt.Errorf("store: model rule: %w", err)
	}
	var r ModelRule
	var org bool
	var models []string
	_, err = pgx.ForEachRow(rows, []any{&org, &models}, func() error {
		if org {
			r.Organization = slices.Clone(models)
		} else {
			r.Project = slices.Clone(models)
		}
		return nil
	})
	if err != nil {
		return ModelRule{}, fmt.Errorf("store: model rule: %w", err)
	}
	return r, nil
}

const allowlistColumns = `organization_id::text, COALESCE(project_id::text, ''), models, updated_by, updated_at`

func scanAllowlist(row pgx.Row) (ModelAllowlist, error) {
	var a ModelAllowlist
	err := row.Scan(&a.OrganizationID, &a.ProjectID, &a.Models, &a.UpdatedBy, &a.UpdatedAt)
	return a, err
}
