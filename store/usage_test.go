package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
)

func TestUsageInsertIsIdempotentAndReports(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	org, project := llmTenant(t, db)
	session := "6f1c2a52-7b1e-4c55-9b8e-2f0d7b1b1a01"
	day1 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	day2 := day1.Add(24 * time.Hour)
	var rows []store.Usage
	cost := int64(250)
	for i := range 4 {
		u := store.Usage{RequestID: fmt.Sprintf("req-%d", i), OrganizationID: org, ProjectID: project,
			Caller: "planner:" + session, SessionID: session, ActingFor: "alice", Provider: "anthropic",
			Model: "claude-a", Status: 200, InputTokens: 10, OutputTokens: 5, CacheReadTokens: 2, CacheWriteTokens: 1,
			DurationMS: 12, CreatedAt: day1, CostMicroUSD: &cost}
		if i%2 == 1 { // unpriced
			u.Model, u.CreatedAt, u.Estimated, u.Caller, u.SessionID, u.CostMicroUSD = "gpt-b", day2, true, "alice", "", nil
		}
		rows = append(rows, u)
	}
	// A row of an unknown organization is skipped, not fatal to the batch.
	rows = append(rows, store.Usage{RequestID: "stale", OrganizationID: "00000000-0000-0000-0000-000000000001",
		Caller: "x", Provider: "openai", Model: "m", Status: 200})
	n, err := db.InsertUsage(ctx, rows)
	if err != nil || n != 4 {
		t.Fatalf("insert = %d, %v", n, err)
	}
	n, err = db.InsertUsage(ctx, rows)
	if err != nil || n != 0 {
		t.Fatalf("re-insert = %d, %v", n, err)
	}
	tests := []struct {
		group store.UsageGroup
		want  []store.UsageTotal
	}{
		{store.UsageByModel, []store.UsageTotal{
			{Key: "claude-a", Requests: 2, InputTokens: 20, OutputTokens: 10, CacheReadTokens: 4, CacheWriteTokens: 2, CostMicroUSD: 500},
			{Key: "gpt-b", Requests: 2, InputTokens: 20, OutputTokens: 10, CacheReadTokens: 4, CacheWriteTokens: 2, Estimated: 2, Unpriced: 2},
		}},
		{store.UsageBySession, []store.UsageTotal{
			{Key: "alice", Requests: 2, InputTokens: 20, OutputTokens: 10, CacheReadTokens: 4, CacheWriteTokens: 2, Estimated: 2, Unpriced: 2},
			{Key: "planner:" + session, Requests: 2, InputTokens: 20, OutputTokens: 10, CacheReadTokens: 4, CacheWriteTokens: 2, CostMicroUSD: 500},
		}},
		{store.UsageByDay, []store.UsageTotal{
			{Key: "2026-03-01", Requests: 2, InputTokens: 20, OutputTokens: 10, CacheReadTokens: 4, CacheWriteTokens: 2, CostMicroUSD: 500},
			{Key: "2026-03-02", Requests: 2, InputTokens: 20, OutputTokens: 10, CacheReadTokens: 4, CacheWriteTokens: 2, Estimated: 2, Unpriced: 2},
		}},
	}
	for _, tt := range tests {
		t.Run(string(tt.group), func(t *testing.T) {
			got, err := db.UsageReport(ctx, project, tt.group, day1.Add(-time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
	got, err := db.UsageReport(ctx, project, store.UsageByDay, day2)
	if err != nil || len(got) != 1 {
		t.Fatalf("since day2: %+v, %v", got, err)
	}
	if _, err := db.UsageReport(ctx, project, "hour", day1); !store.IsCode(err, store.CodeInvalid) {
		t.Fatalf("bad group: %v", err)
	}
}

// TestSettledMoney sums a money budget's span in micro-USD (an unpriced call
// counts 0) and a token budget's in tokens, the same before and after the
// rows roll up into usage_daily.
func TestSettledMoney(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	org, project := llmTenant(t, db)
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	cost := func(v int64) *int64 { return &v }
	var rows []store.Usage
	for i, c := range []*int64{cost(1200), cost(34), nil, cost(5)} {
		rows = append(rows, store.Usage{RequestID: fmt.Sprintf("m-%d", i), OrganizationID: org, ProjectID: project,
			Caller: "planner:s1", Provider: "anthropic", Model: "claude-a", Status: 200, InputTokens: 10, OutputTokens: 1,
			CostMicroUSD: c, CreatedAt: start.Add(time.Duration(i) * time.Hour)})
	}
	rows[3].ProjectID = "" // the organization's own
	if _, err := db.InsertUsage(ctx, rows); err != nil {
		t.Fatal(err)
	}
	end := start.AddDate(0, 1, 0)
	spans := []store.BudgetSpan{
		{ScopeID: project, Start: start, End: end, Money: true},
		{ScopeID: org, Organization: true, Start: start, End: end, Money: true},
	}
	check := func(when string) {
		got, err := db.SettledTokens(ctx, spans)
		if err != nil {
			t.Fatal(err)
		}
		if got[project] != 1234 || got[org] != 5 {
			t.Errorf("%s: money settled %v, want project 1234, organization 5", when, got)
		}
		tokens, err := db.SettledTokens(ctx, []store.BudgetSpan{{ScopeID: project, Start: start, End: end}})
		if err != nil || tokens[project] != 33 {
			t.Errorf("%s: tokens settled %v (%v), want 33", when, tokens, err)
		}
	}
	check("detail rows")
	if _, err := db.RollupUsage(ctx, start.AddDate(0, 0, 1), 100); err != nil {
		t.Fatal(err)
	}
	check("rolled up")
}
