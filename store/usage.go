package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Usage is one metered model call made through the LLM gateway.
type Usage struct {
	// RequestID is unique per call; inserting the same id twice is a no-op.
	RequestID      string `json:"request_id"`
	OrganizationID string `json:"organization_id"`
	// ProjectID is empty for a call made for the organization as a whole.
	ProjectID string `json:"project_id,omitempty"`
	// SessionID is the planner session of the call, or empty.
	SessionID string `json:"session_id,omitempty"`
	// Caller is the token's subject, e.g. planner:<session>.
	Caller    string `json:"caller"`
	ActingFor string `json:"acting_for,omitempty"`
	Provider  string `json:"provider"`
	Model     string `json:"model"`
	// Status is the HTTP status the caller saw (499 when it went away).
	Status           int   `json:"status"`
	InputTokens      int64 `json:"input_tokens"`
	OutputTokens     int64 `json:"output_tokens"`
	CacheReadTokens  int64 `json:"cache_read_tokens"`
	CacheWriteTokens int64 `json:"cache_write_tokens"`
	// Estimated is set when the upstream reported no usage and the gateway
	// estimated it at about four characters per token.
	Estimated  bool      `json:"estimated"`
	DurationMS int       `json:"duration_ms"`
	CreatedAt  time.Time `json:"created_at"`
	// CostMicroUSD is what the call cost, in millionths of a US dollar, at
	// the gateway's prices when it was metered; nil when its model has no
	// price (and for calls metered before prices existed).
	CostMicroUSD *int64 `json:"cost_micro_usd"`
}

// UsageGroup is how a usage report is grouped.
type UsageGroup string

// The groupings of GET /api/v1/projects/{project}/usage?group_by=.
const (
	UsageByModel   UsageGroup = "model"
	UsageBySession UsageGroup = "session" // by caller: planner calls appear as planner:<session>
	UsageByDay     UsageGroup = "day"     // UTC days, keyed YYYY-MM-DD
	// UsageByProject groups an organization's report by project key ("" for
	// the organization's own calls, made without a project).
	UsageByProject UsageGroup = "project"
)

// Valid reports whether g is a known grouping of a project's report.
func (g UsageGroup) Valid() bool {
	return g == UsageByModel || g == UsageBySession || g == UsageByDay
}

// ValidForOrganization reports whether g is a known grouping of an
// organization's report.
func (g UsageGroup) ValidForOrganization() bool {
	return g == UsageByProject || g == UsageByModel || g == UsageByDay
}

// UsageTotal is one group of a usage report.
type UsageTotal struct {
	// Key is the model, the caller (planner:<session>) or the UTC day.
	Key              string `json:"key"`
	Requests         int64  `json:"requests"`
	InputTokens      int64  `json:"input_tokens"`
	OutputTokens     int64  `json:"output_tokens"`
	CacheReadTokens  int64  `json:"cache_read_tokens"`
	CacheWriteTokens int64  `json:"cache_write_tokens"`
	// Estimated counts the requests whose usage was estimated.
	Estimated int64 `json:"estimated"`
	// CostMicroUSD sums the cost of the priced requests, in millionths of
	// a US dollar; Unpriced counts the requests without a cost (a model
	// without a price, or metered before prices existed).
	CostMicroUSD int64 `json:"cost_micro_usd"`
	Unpriced     int64 `json:"unpriced"`
}

// usageTotalColumns are the sums scanUsageTotal reads after the group's
// key, which a report selects first.
const usageTotalColumns = `count(*), COALESCE(sum(input_tokens), 0)::bigint, COALESCE(sum(output_tokens), 0)::bigint,
       COALESCE(sum(cache_read_tokens), 0)::bigint, COALESCE(sum(cache_write_tokens), 0)::bigint,
       count(*) FILTER (WHERE estimated), COALESCE(sum(cost_micro_usd), 0)::bigint,
       count(*) FILTER (WHERE cost_micro_usd IS NULL)`

func scanUsageTotal(row pgx.Row) (UsageTotal, error) {
	var t UsageTotal
	err := row.Scan(&t.Key, &t.Requests, &t.InputTokens, &t.OutputTokens,
		&t.CacheReadTokens, &t.CacheWriteTokens, &t.Estimated, &t.CostMicroUSD, &t.Unpriced)
	return t, err
}

// UsageReport sums a project's usage since a time, grouped by model, caller
// or UTC day, in key order.
func (db *DB) UsageReport(ctx context.Context, projectID string, group UsageGroup, since time.Time) ([]UsageTotal, error) {
	if !group.Valid() {
		return nil, Errorf(CodeInvalid, "group_by must be model, session or day, got %q", group)
	}
	return db.usageReport(ctx, "project_id", projectID, group, since)
}

// OrganizationUsageReport sums an organization's usage (its projects' and
// its own) since a time, grouped by project, model or UTC day, in key
// order.
func (db *DB) OrganizationUsageReport(ctx context.Context, organizationID string, group UsageGroup, since time.Time) ([]UsageTotal, error) {
	if !group.ValidForOrganization() {
		return nil, Errorf(CodeInvalid, "group_by must be project, model or day, got %q", group)
	}
	return db.usageReport(ctx, "organization_id", organizationID, group, since)
}

func (db *DB) usageReport(ctx context.Context, scopeColumn, scopeID string, group UsageGroup, since time.Time) ([]UsageTotal, error) {
	key := map[UsageGroup]string{
		UsageByModel:   "model",
		UsageBySession: "caller",
		UsageByDay:     "to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD')",
		UsageByProject: usageProjectKey,
	}[group]
	// The detail rows and the days retention rolled up (retention_usage.go).
	rows, err := db.pool.Query(ctx, usageReportSQL(key, scopeColumn), scopeID, since)
	if err != nil {
		return nil, fmt.Errorf("store: usage report: %w", err)
	}
	out, err := collect(rows, scanUsageTotal)
	if err != nil {
		return nil, fmt.Errorf("store: usage report: %w", err)
	}
	return out, nil
}

// BudgetSpan is a budgeted scope and the budget period whose usage
// SettledTokens sums.
type BudgetSpan struct {
	// ScopeID is a project's id or, with Organization set, an
	// organization's, for its calls made without a project.
	ScopeID      string
	Organization bool
	// Start and End bound the period, [Start, End), at UTC midnights.
	Start, End time.Time
	// Money sums the cost of the calls in micro-USD instead of tokens.
	Money bool
}

// SettledTokens sums, for each span in one query, the tokens its scope's
// calls used in the period, counted as the gateway settles a budget
// reservation: input, output, cache read and cache write tokens; or, for a
// Money span, their cost in micro-USD (unpriced calls count 0). It reads
// the detail rows and the days retention rolled up into usage_daily (whole
// UTC days, so a period from a midnight is summed exactly either way). A
// scope without usage maps to 0.
func (db *DB) SettledTokens(ctx context.Context, spans []BudgetSpan) (map[string]int64, error) {
	out := make(map[string]int64, len(spans))
	if len(spans) == 0 {
		return out, nil
	}
	ids, orgs, money := make([]string, len(spans)), make([]bool, len(spans)), make([]bool, len(spans))
	starts, ends := make([]time.Time, len(spans)), make([]time.Time, len(spans))
	for i, s := range spans {
		ids[i], orgs[i], starts[i], ends[i], money[i] = s.ScopeID, s.Organization, s.Start, s.End, s.Money
	}
	rows, err := db.pool.Query(ctx, settledTokensSQL, ids, orgs, starts, ends, money)
	if err != nil {
		return nil, fmt.Errorf("store: settled tokens: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var n int64
		if err := rows.Scan(&id, &n); err != nil {
			return nil, fmt.Errorf("store: settled tokens: %w", err)
		}
		out[id] += n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: settled tokens: %w", err)
	}
	return out, nil
}

// settledTokensSQL sums each span's usage with index range scans: a
// project's rows by usage_project_time_idx and usage_daily_project_day_idx,
// an organization's own (project_id NULL) by usage_organization_time_idx.
const settledTokensSQL = `
WITH s (id, org, start_at, end_at, money) AS (
    SELECT * FROM unnest($1::uuid[], $2::bool[], $3::timestamptz[], $4::timestamptz[], $5::bool[])
)
SELECT s.id::text, COALESCE((
    SELECT sum(n) FROM (
        SELECT CASE WHEN s.money THEN COALESCE(cost_micro_usd, 0)
                    ELSE input_tokens + output_tokens + cache_read_tokens + cache_write_tokens END AS n
        FROM usage u
        WHERE NOT s.org AND u.project_id = s.id AND u.created_at >= s.start_at AND u.created_at < s.end_at
        UNION ALL
        SELECT CASE WHEN s.money THEN COALESCE(cost_micro_usd, 0)
                    ELSE input_tokens + output_tokens + cache_read_tokens + cache_write_tokens END
        FROM usage u
        WHERE s.org AND u.organization_id = s.id AND u.project_id IS NULL
          AND u.created_at >= s.start_at AND u.created_at < s.end_at
        UNION ALL
        SELECT CASE WHEN s.money THEN d.cost_micro_usd
                    ELSE input_tokens + output_tokens + cache_read_tokens + cache_write_tokens END
        FROM usage_daily d
        WHERE NOT s.org AND d.project_id = s.id
          AND d.day >= (s.start_at AT TIME ZONE 'UTC')::date AND d.day < (s.end_at AT TIME ZONE 'UTC')::date
        UNION ALL
        SELECT CASE WHEN s.money THEN d.cost_micro_usd
                    ELSE input_tokens + output_tokens + cache_read_tokens + cache_write_tokens END
        FROM usage_daily d
        WHERE s.org AND d.organization_id = s.id AND d.project_id IS NULL
          AND d.day >= (s.start_at AT TIME ZONE 'UTC')::date AND d.day < (s.end_at AT TIME ZONE 'UTC')::date
    ) AS t
), 0)::bigint
FROM s`
