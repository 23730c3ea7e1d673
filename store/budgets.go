package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Budget periods of a token budget.
const (
	BudgetDay   = "day"
	BudgetWeek  = "week"
	BudgetMonth = "month"
)

// Budget units: a budget counts tokens (input, output and cache) or money,
// in micro-USD (millionths of a US dollar) at the gateway's prices.
const (
	BudgetTokens   = "tokens"
	BudgetMicroUSD = "micro_usd"
)

// Limits are the gateway's budget and rate limits of a project or, with
// ProjectID empty, an organization's defaults for its projects. A nil field
// is no limit (or, for a project, the organization's value).
type Limits struct {
	OrganizationID string `json:"organization_id"`
	ProjectID      string `json:"project_id,omitempty"`
	// TokenBudget caps what a period's calls use, in BudgetUnit: tokens
	// (input, output and cache), or micro-USD.
	TokenBudget *int64 `json:"token_budget,omitempty"`
	// BudgetUnit is tokens (the default) or micro_usd.
	BudgetUnit string `json:"budget_unit"`
	// BudgetPeriod is day, week (ISO, from Monday) or month, in UTC.
	BudgetPeriod      string    `json:"budget_period"`
	RequestsPerMinute *int64    `json:"requests_per_minute,omitempty"`
	TokensPerMinute   *int64    `json:"tokens_per_minute,omitempty"`
	UpdatedBy         string    `json:"updated_by,omitempty"`
	UpdatedAt         time.Time `json:"updated_at,omitzero"`
}

// Unlimited reports whether no limit applies.
func (l Limits) Unlimited() bool {
	return l.TokenBudget == nil && l.RequestsPerMinute == nil && l.TokensPerMinute == nil
}

// PutLimits creates or replaces the limits at organization scope (ProjectID
// empty) or project scope.
func (db *DB) PutLimits(ctx context.Context, l Limits) (Limits, error) {
	if l.BudgetPeriod == "" {
		l.BudgetPeriod = BudgetMonth
	}
	if l.BudgetPeriod != BudgetDay && l.BudgetPeriod != BudgetWeek && l.BudgetPeriod != BudgetMonth {
		return Limits{}, Errorf(CodeInvalid, "budget_period must be day, week or month, got %q", l.BudgetPeriod)
	}
	if l.BudgetUnit == "" {
		l.BudgetUnit = BudgetTokens
	}
	if l.BudgetUnit != BudgetTokens && l.BudgetUnit != BudgetMicroUSD {
		return Limits{}, Errorf(CodeInvalid, "budget_unit must be tokens or micro_usd, got %q", l.BudgetUnit)
	}
	for name, v := range map[string]*int64{"token_budget": l.TokenBudget, "requests_per_minute": l.RequestsPerMinute, "tokens_per_minute": l.TokensPerMinute} {
		if v != nil && *v < 0 {
			return Limits{}, Errorf(CodeInvalid, "%s must not be negative", name)
		}
	}
	conflict := `(organization_id) WHERE project_id IS NULL`
	if l.ProjectID != "" {
		conflict = `(project_id) WHERE project_id IS NOT NULL`
	}
	row := db.pool.QueryRow(ctx, `
INSERT INTO limits (organization_id, project_id, token_budget, budget_period, requests_per_minute, tokens_per_minute, updated_by, budget_unit)
SELECT $1::uuid, NULLIF($2, '')::uuid, $3, $4, $5, $6, $7, $8
WHERE $2 = '' OR EXISTS (SELECT 1 FROM projects WHERE id = NULLIF($2, '')::uuid AND organization_id = $1::uuid)
ON CONFLICT `+conflict+` DO UPDATE SET
    token_budget = EXCLUDED.token_budget, budget_period = EXCLUDED.budget_period, budget_unit = EXCLUDED.budget_unit,
    requests_per_minute = EXCLUDED.requests_per_minute, tokens_per_minute = EXCLUDED.tokens_per_minute,
    updated_by = EXCLUDED.updated_by, updated_at = now()
RETURNING `+limitsColumns,
		l.OrganizationID, l.ProjectID, l.TokenBudget, l.BudgetPeriod, l.RequestsPerMinute, l.TokensPerMinute, l.UpdatedBy, l.BudgetUnit)
	out, err := scanLimits(row)
	if err != nil {
		return Limits{}, fmt.Errorf("store: put limits: %w", notFound(err, "project %s of organization %s", l.ProjectID, l.OrganizationID))
	}
	return out, nil
}

// GetLimits returns the limits stored exactly at the scope given.
func (db *DB) GetLimits(ctx context.Context, organizationID, projectID string) (Limits, error) {
	row := db.pool.QueryRow(ctx, `SELECT `+limitsColumns+` FROM limits
WHERE organization_id = $1::uuid AND project_id IS NOT DISTINCT FROM NULLIF($2, '')::uuid`, organizationID, projectID)
	l, err := scanLimits(row)
	if err != nil {
		return Limits{}, fmt.Errorf("store: get limits: %w", notFound(err, "limits"))
	}
	return l, nil
}

// DeleteLimits removes the limits stored exactly at the scope given.
func (db *DB) DeleteLimits(ctx context.Context, organizationID, projectID string) error {
	tag, err := db.pool.Exec(ctx, `DELETE FROM limits
WHERE organization_id = $1::uuid AND project_id IS NOT DISTINCT FROM NULLIF($2, '')::uuid`, organizationID, projectID)
	if err != nil {
		return fmt.Errorf("store: delete limits: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("store: delete limits: %w", Errorf(CodeNotFound, "limits not found"))
	}
	return nil
}

// EffectiveLimits merges a project's limits over its organization's
// defaults, field by field: a field the project leaves unset takes the
// organization's value. With no rows at all every field is nil (unlimited).
func (db *DB) EffectiveLimits(ctx context.Context, organizationID, projectID string) (Limits, error) {
	l := Limits{OrganizationID: organizationID, ProjectID: projectID, BudgetPeriod: BudgetMonth, BudgetUnit: BudgetTokens}
	rows, err := db.pool.Query(ctx, `SELECT `+limitsColumns+` FROM limits
WHERE organization_id = $1::uuid AND (project_id IS NULL OR project_id = NULLIF($2, '')::uuid)
ORDER BY project_id IS NULL`, organizationID, projectID)
	if err != nil {
		return Limits{}, fmt.Errorf("store: effective limits: %w", err)
	}
	found, err := collect(rows, scanLimits)
	if err != nil {
		return Limits{}, fmt.Errorf("store: effective limits: %w", err)
	}
	// Most specific first: the first non-nil value of each field wins.
	for i := len(found) - 1; i >= 0; i-- {
		f := found[i]
		if f.TokenBudget != nil {
			l.TokenBudget, l.BudgetPeriod, l.BudgetUnit = f.TokenBudget, f.BudgetPeriod, f.BudgetUnit
		}
		if f.RequestsPerMinute != nil {
			l.RequestsPerMinute = f.RequestsPerMinute
		}
		if f.TokensPerMinute != nil {
			l.TokensPerMinute = f.TokensPerMinute
		}
		l.UpdatedBy, l.UpdatedAt = f.UpdatedBy, f.UpdatedAt
	}
	return l, nil
}

// BudgetScope is a scope whose calls a budget limits in the current
// period, as EffectiveLimits merges it: a project, by its own budget or its
// organization's default, or an organization, by its own budget, for its
// calls made without a project.
type BudgetScope struct {
	// ScopeID is a project's id or, with Organization set, an
	// organization's.
	ScopeID      string
	Organization bool
	// Budget is what a period's calls may use, in Unit.
	Budget int64
	// Period is day, week or month; Unit is tokens or micro_usd.
	Period, Unit string
}

// BudgetScopes lists every budgeted scope, in no particular order.
func (db *DB) BudgetScopes(ctx context.Context) ([]BudgetScope, error) {
	rows, err := db.pool.Query(ctx, budgetScopesSQL)
	if err != nil {
		return nil, fmt.Errorf("store: budget scopes: %w", err)
	}
	out, err := collect(rows, scanBudgetScope)
	if err != nil {
		return nil, fmt.Errorf("store: budget scopes: %w", err)
	}
	return out, nil
}

// budgetScopesSQL lists the budgeted scopes the way EffectiveLimits merges
// their limits: a project's own budget, else its organization's default;
// and an organization's budget for calls made without a project.
const budgetScopesSQL = `
SELECT p.id::text, false,
       COALESCE(pl.token_budget, ol.token_budget),
       CASE WHEN pl.token_budget IS NOT NULL THEN pl.budget_period ELSE ol.budget_period END,
       CASE WHEN pl.token_budget IS NOT NULL THEN pl.budget_unit ELSE ol.budget_unit END
FROM projects p
LEFT JOIN limits pl ON pl.project_id = p.id
LEFT JOIN limits ol ON ol.organization_id = p.organization_id AND ol.project_id IS NULL
WHERE pl.token_budget IS NOT NULL OR ol.token_budget IS NOT NULL
UNION ALL
SELECT organization_id::text, true, token_budget, budget_period, budget_unit FROM limits
WHERE project_id IS NULL AND token_budget IS NOT NULL`

func scanBudgetScope(row pgx.Row) (BudgetScope, error) {
	var s BudgetScope
	err := row.Scan(&s.ScopeID, &s.Organization, &s.Budget, &s.Period, &s.Unit)
	return s, err
}

// limitsColumns are what scanLimits reads from limits.
const limitsColumns = `organization_id, COALESCE(project_id::text, ''), token_budget, budget_period,
	requests_per_minute::bigint, tokens_per_minute, updated_by, updated_at, budget_unit`

func scanLimits(row pgx.Row) (Limits, error) {
	var l Limits
	err := row.Scan(&l.OrganizationID, &l.ProjectID, &l.TokenBudget, &l.BudgetPeriod,
		&l.RequestsPerMinute, &l.TokensPerMinute, &l.UpdatedBy, &l.UpdatedAt, &l.BudgetUnit)
	return l, err
}
