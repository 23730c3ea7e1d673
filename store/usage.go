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
}

// UsageGroup is how a usage report is grouped.
type UsageGroup string

// The groupings of GET /api/v1/projects/{project}/usage?group_by=.
const (
	UsageByModel   UsageGroup = "model"
	UsageBySession UsageGroup = "session" // by caller: planner calls appear as planner:<session>
	UsageByDay     UsageGroup = "day"     // UTC days, keyed YYYY-MM-DD
)

// Valid reports whether g is a known grouping.
func (g UsageGroup) Valid() bool {
	return g == UsageByModel || g == UsageBySession || g == UsageByDay
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
}

// usageTotalColumns are the sums scanUsageTotal reads after the group's
// key, which a report selects first.
const usageTotalColumns = `count(*), COALESCE(sum(input_tokens), 0)::bigint, COALESCE(sum(output_tokens), 0)::bigint,
       COALESCE(sum(cache_read_tokens), 0)::bigint, COALESCE(sum(cache_write_tokens), 0)::bigint,
       count(*) FILTER (WHERE estimated)`

func scanUsageTotal(row pgx.Row) (UsageTotal, error) {
	var t UsageTotal
	err := row.Scan(&t.Key, &t.Requests, &t.InputTokens, &t.OutputTokens,
		&t.CacheReadTokens, &t.CacheWriteTokens, &t.Estimated)
	return t, err
}

// UsageReport sums a project's usage since a time, grouped by model, caller
// or UTC day, in key order.
func (db *DB) UsageReport(ctx context.Context, projectID string, group UsageGroup, since time.Time) ([]UsageTotal, error) {
	var key string
	switch group {
	case UsageByModel:
		key = "model"
	case UsageBySession:
		key = "caller"
	case UsageByDay:
		key = "to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD')"
	default:
		return nil, Errorf(CodeInvalid, "group_by must be model, session or day, got %q", group)
	}
	// The detail rows and the days retention rolled up (retention_usage.go).
	rows, err := db.pool.Query(ctx, usageReportSQL(key), projectID, since)
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
}

// SettledTokens sums, for each span in one query, the tokens its scope's
// calls used in the period, counted as the gateway settles a budget
// reservation: input, output, cache read and cache write tokens. It reads
// the detail rows and the days retention rolled up into usage_daily (whole
// UTC days, so a period from a midnight is summed exactly either way). A
// scope without usage maps to 0.
func (db *DB) SettledTokens(ctx context.Context, spans []BudgetSpan) (map[string]int64, error) {
	out := make(map[string]int64, len(spans))
	if len(spans) == 0 {
		return out, nil
	}
	ids, orgs := make([]string, len(spans)), make([]bool, len(spans))
	starts, ends := make([]time.Time, len(spans)), make([]time.Time, len(spans))
	for i, s := range spans {
		ids[i], orgs[i], starts[i], ends[i] = s.ScopeID, s.Organization, s.Start, s.End
	}
	rows, err := db.pool.Query(ctx, settledTokensSQL, ids, orgs, starts, ends)
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
WITH s (id, org, start_at, end_at) AS (
    SELECT * FROM unnest($1::uuid[], $2::bool[], $3::timestamptz[], $4::timestamptz[])
)
SELECT s.id::text, COALESCE((
    SELECT sum(n) FROM (
        SELECT input_tokens + output_tokens + cache_read_tokens + cache_write_tokens AS n
        FROM usage u
        WHERE NOT s.org AND u.project_id = s.id AND u.created_at >= s.start_at AND u.created_at < s.end_at
        UNION ALL
        SELECT input_tokens + output_tokens + cache_read_tokens + cache_write_tokens
        FROM usage u
        WHERE s.org AND u.organization_id = s.id AND u.project_id IS NULL
          AND u.created_at >= s.start_at AND u.created_at < s.end_at
        UNION ALL
        SELECT input_tokens + output_tokens + cache_read_tokens + cache_write_tokens
        FROM usage_daily d
        WHERE NOT s.org AND d.project_id = s.id
          AND d.day >= (s.start_at AT TIME ZONE 'UTC')::date AND d.day < (s.end_at AT TIME ZONE 'UTC')::date
        UNION ALL
        SELECT input_tokens + output_tokens + cache_read_tokens + cache_write_tokens
        FROM usage_daily d
        WHERE s.org AND d.organization_id = s.id AND d.project_id IS NULL
          AND d.day >= (s.start_at AT TIME ZONE 'UTC')::date AND d.day < (s.end_at AT TIME ZONE 'UTC')::date
    ) AS t
), 0)::bigint
FROM s`
