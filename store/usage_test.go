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
	for i := range 4 {
		u := store.Usage{RequestID: fmt.Sprintf("req-%d", i), OrganizationID: org, ProjectID: project,
			Caller: "planner:" + session, SessionID: session, ActingFor: "alice", Provider: "anthropic",
			Model: "claude-a", Status: 200, InputTokens: 10, OutputTokens: 5, CacheReadTokens: 2, CacheWriteTokens: 1,
			DurationMS: 12, CreatedAt: day1}
		if i%2 == 1 {
			u.Model, u.CreatedAt, u.Estimated, u.Caller, u.SessionID = "gpt-b", day2, true, "alice", ""
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
			{Key: "claude-a", Requests: 2, InputTokens: 20, OutputTokens: 10, CacheReadTokens: 4, CacheWriteTokens: 2},
			{Key: "gpt-b", Requests: 2, InputTokens: 20, OutputTokens: 10, CacheReadTokens: 4, CacheWriteTokens: 2, Estimated: 2},
		}},
		{store.UsageBySession, []store.UsageTotal{
			{Key: "alice", Requests: 2, InputTokens: 20, OutputTokens: 10, CacheReadTokens: 4, CacheWriteTokens: 2, Estimated: 2},
			{Key: "planner:" + session, Requests: 2, InputTokens: 20, OutputTokens: 10, CacheReadTokens: 4, CacheWriteTokens: 2},
		}},
		{store.UsageByDay, []store.UsageTotal{
			{Key: "2026-03-01", Requests: 2, InputTokens: 20, OutputTokens: 10, CacheReadTokens: 4, CacheWriteTokens: 2},
			{Key: "2026-03-02", Requests: 2, InputTokens: 20, OutputTokens: 10, CacheReadTokens: 4, CacheWriteTokens: 2, Estimated: 2},
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
