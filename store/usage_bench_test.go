package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
)

// BenchmarkInsertUsage writes batches of 500 new usage rows, as the
// gateway's usage writer does under load; ns/op and allocations are per
// row.
func BenchmarkInsertUsage(b *testing.B) {
	ctx := context.Background()
	db := storetest.New(b)
	org, project := llmTenant(b, db)
	const batch = 500
	rows := make([]store.Usage, batch)
	now := time.Now()
	n := 0
	b.ReportAllocs()
	for b.Loop() {
		if n%batch == 0 && n > 0 {
			if _, err := db.InsertUsage(ctx, rows); err != nil {
				b.Fatal(err)
			}
		}
		rows[n%batch] = store.Usage{RequestID: fmt.Sprintf("gwreq_%024d", n), OrganizationID: org, ProjectID: project,
			SessionID: "6f1c2a52-7b1e-4c55-9b8e-2f0d7b1b1a01", Caller: "planner:6f1c2a52-7b1e-4c55-9b8e-2f0d7b1b1a01",
			Provider: "anthropic", Model: "claude-bench", Status: 200, InputTokens: 50, OutputTokens: 60,
			DurationMS: 40, CreatedAt: now}
		n++
	}
}
