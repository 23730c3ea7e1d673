package store

import (
	"context"
	"fmt"
	"time"
)

// RollupUsage moves up to batch usage detail rows created before cutoff
// into usage_daily, one statement: the rows it deletes are the rows it adds
// to their day's totals, so nothing is counted twice or lost. It returns
// how many detail rows moved. The caller passes a UTC midnight, so that a
// day is rolled up whole and a report from a day's start stays exact.
func (db *DB) RollupUsage(ctx context.Context, cutoff time.Time, batch int) (int64, error) {
	var n int64
	if err := db.pool.QueryRow(ctx, rollupUsageSQL, cutoff, batch).Scan(&n); err != nil {
		return 0, fmt.Errorf("store: roll up usage: %w", err)
	}
	return n, nil
}

// rollupUsageSQL moves one batch; its select walks usage_created_idx.
const rollupUsageSQL = `
WITH moved AS (
    DELETE FROM usage WHERE id = ANY(ARRAY(
        SELECT id FROM usage WHERE created_at < $1 ORDER BY created_at LIMIT $2))
    RETURNING organization_id, project_id, created_at, caller, provider, model, input_tokens, output_tokens,
              cache_read_tokens, cache_write_tokens, estimated, duration_ms, cost_micro_usd
), added AS (
    INSERT INTO usage_daily AS d (organization_id, project_id, day, caller, provider, model, requests,
                                  input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
                                  estimated, duration_ms, cost_micro_usd, unpriced)
    SELECT organization_id, project_id, (created_at AT TIME ZONE 'UTC')::date, caller, provider, model, count(*),
           sum(input_tokens), sum(output_tokens), sum(cache_read_tokens), sum(cache_write_tokens),
           count(*) FILTER (WHERE estimated), sum(duration_ms), COALESCE(sum(cost_micro_usd), 0),
           count(*) FILTER (WHERE cost_micro_usd IS NULL)
    FROM moved
    GROUP BY organization_id, project_id, (created_at AT TIME ZONE 'UTC')::date, caller, provider, model
    ON CONFLICT ON CONSTRAINT usage_daily_key DO UPDATE SET
        requests = d.requests + EXCLUDED.requests,
        input_tokens = d.input_tokens + EXCLUDED.input_tokens,
        output_tokens = d.output_tokens + EXCLUDED.output_tokens,
        cache_read_tokens = d.cache_read_tokens + EXCLUDED.cache_read_tokens,
        cache_write_tokens = d.cache_write_tokens + EXCLUDED.cache_write_tokens,
        estimated = d.estimated + EXCLUDED.estimated,
        duration_ms = d.duration_ms + EXCLUDED.duration_ms,
        cost_micro_usd = d.cost_micro_usd + EXCLUDED.cost_micro_usd,
        unpriced = d.unpriced + EXCLUDED.unpriced
    RETURNING 1
)
SELECT count(*) FROM moved`

// RollupUsageExplain is the plan of one RollupUsage batch, for tests that
// check it walks an index.
func (db *DB) RollupUsageExplain(ctx context.Context, cutoff time.Time, batch int) (string, error) {
	return db.explain(ctx, rollupUsageSQL, cutoff, batch)
}

// usageProjectKey is the report key of a row's project, in both tables.
const usageProjectKey = "COALESCE((SELECT p.key FROM projects p WHERE p.id = project_id), '')"

// usageDailyKeys are the usage_daily twins of a report's group keys.
var usageDailyKeys = map[string]string{
	usageProjectKey: usageProjectKey,
	"model":         "model",
	"caller":        "caller",
	"to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD')": "to_char(day, 'YYYY-MM-DD')",
}

// usageReportSQL sums the usage of a project or organization (scopeColumn
// = $1) since $2 grouped by key: the detail rows, plus the days rolled up
// into usage_daily that start at or after $2 (rollups are by whole UTC
// day, so a report from a day's start gives the same totals before and
// after the rollup).
func usageReportSQL(key, scopeColumn string) string {
	return `
SELECT k, sum(requests)::bigint, sum(input_tokens)::bigint, sum(output_tokens)::bigint,
       sum(cache_read_tokens)::bigint, sum(cache_write_tokens)::bigint, sum(estimated)::bigint,
       sum(cost_micro_usd)::bigint, sum(unpriced)::bigint
FROM (
    SELECT ` + key + ` AS k, ` + usageTotalColumns + `
    FROM usage
    WHERE ` + scopeColumn + ` = $1 AND created_at >= $2
    GROUP BY k
    UNION ALL
    SELECT ` + usageDailyKeys[key] + ` AS k, sum(requests), sum(input_tokens), sum(output_tokens),
           sum(cache_read_tokens), sum(cache_write_tokens), sum(estimated), sum(cost_micro_usd), sum(unpriced)
    FROM usage_daily
    WHERE ` + scopeColumn + ` = $1
      AND day >= (date_trunc('day', ($2::timestamptz AT TIME ZONE 'UTC') - interval '1 microsecond') + interval '1 day')::date
    GROUP BY k
) AS t (k, requests, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, estimated,
       cost_micro_usd, unpriced)
GROUP BY k
ORDER BY k`
}
