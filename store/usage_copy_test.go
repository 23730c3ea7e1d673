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

// storedUsage is a usage row as Postgres holds it.
type storedUsage struct {
	caller, model, actingFor string
	status, durationMS       int
	input                    int64
	estimated                bool
	created                  time.Time
}

func readUsage(t *testing.T, db *store.DB, requestID string) storedUsage {
	t.Helper()
	var u storedUsage
	err := db.Pool().QueryRow(context.Background(), `SELECT caller, model, COALESCE(acting_for, ''), status,
       duration_ms, input_tokens, estimated, created_at FROM usage WHERE request_id = $1`, requestID).
		Scan(&u.caller, &u.model, &u.actingFor, &u.status, &u.durationMS, &u.input, &u.estimated, &u.created)
	if err != nil {
		t.Fatalf("read usage %s: %v", requestID, err)
	}
	return u
}

// TestInsertUsageStoresEachValueAsGiven: text with COPY's special
// characters, negative counts (stored as 0), a zero time (stored as now),
// nanoseconds (cut to microseconds) and 32-bit wrap-around all come back
// as an INSERT of the same values gives them.
func TestInsertUsageStoresEachValueAsGiven(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	org, project := llmTenant(t, db)
	odd := "tab\there, line\nbreak, cr\rreturn, back\\slash \\N \"quoted\" é 😀"
	created := time.Date(2026, 3, 1, 10, 0, 0, 123456789, time.FixedZone("x", 5*3600))
	before := time.Now().Add(-time.Second)
	rows := []store.Usage{
		{RequestID: "odd", OrganizationID: org, ProjectID: project, Caller: odd, ActingFor: odd, Provider: "anthropic",
			Model: odd, Status: 200, InputTokens: -5, Estimated: true, DurationMS: 1<<31 + 7, CreatedAt: created},
		{RequestID: "now", OrganizationID: org, Caller: "c", Provider: "openai", Model: "m", Status: 499, InputTokens: 3},
	}
	if n, err := db.InsertUsage(ctx, rows); err != nil || n != 2 {
		t.Fatalf("insert = %d, %v", n, err)
	}
	got := readUsage(t, db, "odd")
	wrapped := 1<<31 + 7
	want := storedUsage{caller: odd, model: odd, actingFor: odd, status: 200, durationMS: int(int32(wrapped)),
		input: 0, estimated: true, created: created.Truncate(time.Microsecond)}
	if !got.created.Equal(want.created) {
		t.Errorf("created_at %v, want %v", got.created, want.created)
	}
	got.created = want.created
	if got != want {
		t.Errorf("stored %+v\nwant %+v", got, want)
	}
	now := readUsage(t, db, "now")
	if now.status != 499 || now.input != 3 || now.actingFor != "" || now.created.Before(before) || now.created.After(time.Now().Add(time.Second)) {
		t.Errorf("stored %+v, want status 499, 3 input tokens, no acting_for, created now", now)
	}
}

// TestInsertUsageFirstOfARequestIDWins: a request id twice in one batch is
// stored once, with the first row's values; the next batch on the same
// connections starts from an empty staging table.
func TestInsertUsageFirstOfARequestIDWins(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	org, _ := llmTenant(t, db)
	row := func(id, model string) store.Usage {
		return store.Usage{RequestID: id, OrganizationID: org, Caller: "c", Provider: "p", Model: model, Status: 200}
	}
	if n, err := db.InsertUsage(ctx, []store.Usage{row("a", "first"), row("b", "b"), row("a", "second")}); err != nil || n != 2 {
		t.Fatalf("insert = %d, %v", n, err)
	}
	if m := readUsage(t, db, "a").model; m != "first" {
		t.Errorf("model %q, want the first row's", m)
	}
	for range 3 {
		if n, err := db.InsertUsage(ctx, []store.Usage{row("c", "c")}); err != nil || n > 1 {
			t.Fatalf("next batch = %d, %v (rows of an earlier batch came again)", n, err)
		}
	}
	var count int
	if err := db.Pool().QueryRow(ctx, `SELECT count(*) FROM usage WHERE organization_id = $1`, org).Scan(&count); err != nil || count != 3 {
		t.Fatalf("%d rows stored (%v), want 3", count, err)
	}
}

// TestInsertUsageRefusesAMalformedBatchWhole: an organization id that is
// no UUID fails the batch with Postgres's error, and none of its rows is
// stored; the batch after it goes in.
func TestInsertUsageRefusesAMalformedBatchWhole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	org, _ := llmTenant(t, db)
	bad := []store.Usage{
		{RequestID: "good", OrganizationID: org, Caller: "c", Provider: "p", Model: "m", Status: 200},
		{RequestID: "bad", OrganizationID: "not-a-uuid", Caller: "c", Provider: "p", Model: "m", Status: 200},
	}
	_, err := db.InsertUsage(ctx, bad)
	if err == nil || !strings.Contains(err.Error(), "store: insert usage") || !strings.Contains(err.Error(), "uuid") {
		t.Fatalf("malformed batch: %v, want the insert's uuid error", err)
	}
	var count int
	if err := db.Pool().QueryRow(ctx, `SELECT count(*) FROM usage`).Scan(&count); err != nil || count != 0 {
		t.Fatalf("%d rows stored after a failed batch (%v)", count, err)
	}
	if n, err := db.InsertUsage(ctx, bad[:1]); err != nil || n != 1 {
		t.Fatalf("next batch = %d, %v", n, err)
	}
}

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
