package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
)

// TestRetentionBatchesWalkIndexes: on tables with many rows, most of them
// recent as retention leaves them, each batch's select reads its table
// through the age index, never a sequential scan.
func TestRetentionBatchesWalkIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newTrackerFixture(t)
	db := f.db
	s, err := db.CreateSession(ctx, f.engineer, "WEB", "plan")
	if err != nil {
		t.Fatal(err)
	}
	res, err := db.SendMessage(ctx, f.engineer, s.ID, "hello", "", store.QueueLimits{})
	if err != nil {
		t.Fatal(err)
	}
	const rows, old = 20000, 200
	now := time.Now()
	for _, st := range []struct {
		sql  string
		args []any
	}{
		{`UPDATE planner_turns SET status = 'done', started_at = now(), finished_at = now() WHERE id = $1`, []any{res.Turn}},
		{`INSERT INTO planner_outputs (session_id, cursor, turn_id, type, data, created_at)
		  SELECT $1, 1000 + i, $2, 'tool_call', '{}', $3::timestamptz - CASE WHEN i <= $4 THEN interval '60 days' ELSE interval '0' END
		  FROM generate_series(1, $5::int) i`, []any{s.ID, res.Turn, now, old, rows}},
		{`INSERT INTO usage (request_id, organization_id, project_id, caller, provider, model, status, created_at)
		  SELECT 'r' || i, $1, $2, 'alice', 'anthropic', 'm', 200,
		         $3::timestamptz - CASE WHEN i <= $4 THEN interval '120 days' ELSE interval '0' END
		  FROM generate_series(1, $5::int) i`, []any{f.org.ID, f.project.ID, now, old, rows}},
		{`INSERT INTO events (organization_id, project_id, type, entity_type, entity_id, actor_kind, actor_subject, occurred_at)
		  SELECT $1, $2, 'item.created', 'item', 'x' || i, 'system', 'system',
		         $3::timestamptz - CASE WHEN i <= $4 THEN interval '60 days' ELSE interval '0' END
		  FROM generate_series(1, $5::int) i`, []any{f.org.ID, f.project.ID, now, old, rows}},
		{`ANALYZE planner_outputs, usage, events, planner_turns`, nil},
	} {
		if _, err := db.Pool().Exec(ctx, st.sql, st.args...); err != nil {
			t.Fatalf("%s: %v", st.sql, err)
		}
	}
	cutoff := now.Add(-30 * 24 * time.Hour)
	for _, tt := range []struct {
		table, index string
		explain      func(context.Context, time.Time, int) (string, error)
	}{
		{"planner_outputs", "planner_outputs_created_idx", db.PruneOutputsExplain},
		{"usage", "usage_created_idx", db.RollupUsageExplain},
		{"events", "events_occurred_idx", db.PruneEventsExplain},
	} {
		plan, err := tt.explain(ctx, cutoff, 1000)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("the batch of %s:\n%s", tt.table, plan)
		if !strings.Contains(plan, tt.index) || strings.Contains(plan, "Seq Scan on "+tt.table) {
			t.Errorf("the batch of %s does not walk %s:\n%s", tt.table, tt.index, plan)
		}
	}
}

// TestRollupUsageKeepsTotals: usage detail rolled up by day in small
// batches, an organization's own calls (no project) among them, gives the
// same report totals, grouped every way, from the start and from a day's
// start; nothing is counted twice when a day's rows roll up over several
// batches and runs.
func TestRollupUsageKeepsTotals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	org, project := llmTenant(t, db)
	day := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	var rows []store.Usage
	for i := range 40 {
		u := store.Usage{RequestID: fmt.Sprintf("req-%d", i), OrganizationID: org, ProjectID: project,
			Caller: []string{"alice", "planner:s1", "planner:s2"}[i%3], Provider: "anthropic",
			Model: []string{"claude-a", "gpt-b"}[i%2], Status: 200, InputTokens: int64(i), OutputTokens: int64(2 * i),
			CacheReadTokens: int64(i % 5), CacheWriteTokens: int64(i % 3), Estimated: i%4 == 0,
			CreatedAt: day.Add(time.Duration(i) * 3 * time.Hour)}
		if i%7 == 0 {
			u.ProjectID = "" // the organization's own call
		}
		if i%5 != 0 { // the others unpriced
			cost := int64(100 * i)
			u.CostMicroUSD = &cost
		}
		rows = append(rows, u)
	}
	if _, err := db.InsertUsage(ctx, rows); err != nil {
		t.Fatal(err)
	}
	report := func() map[string][]store.UsageTotal {
		out := map[string][]store.UsageTotal{}
		for _, g := range []store.UsageGroup{store.UsageByModel, store.UsageBySession, store.UsageByDay} {
			for _, since := range []time.Time{{}, day.Add(48 * time.Hour), day.Add(96 * time.Hour)} {
				r, err := db.UsageReport(ctx, project, g, since)
				if err != nil {
					t.Fatal(err)
				}
				out[fmt.Sprintf("%s since %s", g, since.Format(time.DateOnly))] = r
			}
		}
		for _, g := range []store.UsageGroup{store.UsageByProject, store.UsageByModel, store.UsageByDay} {
			r, err := db.OrganizationUsageReport(ctx, org, g, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			out["organization by "+string(g)] = r
		}
		return out
	}
	before := report()
	var cost, unpriced int64
	for _, g := range before["organization by project"] {
		cost, unpriced = cost+g.CostMicroUSD, unpriced+g.Unpriced
	}
	if cost == 0 || unpriced != 8 {
		t.Fatalf("before the rollup: cost %d, unpriced %d; want some cost and 8 unpriced", cost, unpriced)
	}
	// Two cutoffs, the second after more rows of a rolled-up day arrived
	// late: the day's totals add up.
	for _, cutoff := range []time.Time{day.Add(72 * time.Hour), day.Add(72 * time.Hour), day.Add(120 * time.Hour)} {
		for {
			n, err := db.RollupUsage(ctx, cutoff, 3)
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				break
			}
		}
	}
	var detail, daily, dailyOrg int64
	if err := db.Pool().QueryRow(ctx, `SELECT (SELECT count(*) FROM usage), (SELECT sum(requests) FROM usage_daily),
		(SELECT sum(requests) FROM usage_daily WHERE project_id IS NULL)`).Scan(&detail, &daily, &dailyOrg); err != nil {
		t.Fatal(err)
	}
	if detail+daily != 40 || daily != 40 || dailyOrg != 6 {
		t.Errorf("detail %d + rolled up %d (organization's %d), want 0 + 40 (6)", detail, daily, dailyOrg)
	}
	after := report()
	for k, want := range before {
		got := after[k]
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("usage by %s: after the rollup %+v, before %+v", k, got, want)
		}
	}
}

// TestPruneEventsKeepsTheLogAppendOnly: outside a retention batch the
// event log still refuses deletes and updates.
func TestPruneEventsKeepsTheLogAppendOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newTrackerFixture(t)
	for _, sql := range []string{`DELETE FROM events`, `UPDATE events SET type = 'item.updated'`} {
		if _, err := f.db.Pool().Exec(ctx, sql); err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s = %v, want refused as append-only", sql, err)
		}
	}
	numberAll(t, f.db)
	latest, err := f.db.LatestEventSeq(ctx, f.org.ID)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := f.db.PruneEvents(ctx, time.Now().Add(time.Hour), 1000); err != nil || n == 0 {
		t.Fatalf("prune = %d, %v; want the fixture's events gone", n, err)
	}
	for _, tt := range []struct {
		org     string
		from    int64
		refused bool
	}{
		{f.org.ID, 0, true},
		{f.org.ID, latest - 1, true},
		{f.org.ID, latest, false},
		{f.otherOrg.ID, 0, true},
	} {
		err := f.db.CheckEventSeq(ctx, tt.org, tt.from)
		if tt.refused != store.IsCode(err, store.CodeResyncRequired) || (!tt.refused && err != nil) {
			t.Errorf("replay of %s from %d = %v, want refused %v", tt.org, tt.from, err, tt.refused)
		}
	}
}
