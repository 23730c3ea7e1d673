package store_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/balletplanner/ballet/store"
)

// BenchmarkCreateItem measures one ticket create: key allocation, insert and
// its event in one transaction.
func BenchmarkCreateItem(b *testing.B) {
	ctx := context.Background()
	f := newTrackerFixture(b)
	in := store.NewItem{Kind: store.KindTicket, Title: "Bench ticket", Description: "body",
		AcceptanceCriteria: []string{"one", "two"}}
	b.ResetTimer()
	for b.Loop() {
		if _, err := f.db.CreateItem(ctx, f.engineer, "WEB", in); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkApplyChangeset50 measures applying a 50-operation changeset: 20
// creates (half of them in a new epic), 15 blocks dependencies between the
// new tickets and 15 updates of existing tickets. Proposing is not timed.
func BenchmarkApplyChangeset50(b *testing.B) {
	ctx := context.Background()
	f := newTrackerFixture(b)
	var existing []string
	for range 15 {
		existing = append(existing, f.create(b, store.NewItem{Kind: store.KindTicket}).Key)
	}
	ops := []store.Operation{createOp("epic", store.KindEpic, "Bench epic")}
	for i := range 19 {
		op := createOp(fmt.Sprintf("t%d", i), store.KindTicket, fmt.Sprintf("Ticket %d", i))
		if i%2 == 0 {
			op.Create.Epic = "$epic"
		}
		ops = append(ops, op)
	}
	for i := range 15 {
		ops = append(ops, depOp(fmt.Sprintf("$t%d", i), fmt.Sprintf("$t%d", i+1), store.DependencyBlocks))
	}
	for i, key := range existing {
		ops = append(ops, updateOp(key, store.ItemPatch{Description: ptr(fmt.Sprintf("rev %d", i))}))
	}
	all := make([]int, len(ops))
	for i := range all {
		all[i] = i
	}
	if len(ops) != 50 {
		b.Fatalf("%d operations, want 50", len(ops))
	}
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		cs, err := f.db.ProposeChangeset(ctx, f.engineer, "WEB", store.Proposal{Title: "bench", Operations: ops})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if _, err := f.db.ApplyChangeset(ctx, f.engineer, cs.ID, all); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRunnable measures Runnable over 10,000 tickets (about 3 in 10
// ready, 4 in 10 done, spread by a hash) with 20,000 blocks dependencies,
// seeded in bulk.
func BenchmarkRunnable(b *testing.B) {
	ctx := context.Background()
	f := newTrackerFixture(b)
	pool := f.db.Pool()
	_, err := pool.Exec(ctx, `
		INSERT INTO items (project_id, number, key, kind, title, state, type, review_mode, merge_mode, created_by)
		SELECT $1, n, 'WEB-' || n, 'ticket', 'Ticket ' || n,
		       CASE WHEN abs(hashint4(n)) % 10 < 3 THEN 'ready' WHEN abs(hashint4(n)) % 10 < 7 THEN 'done' ELSE 'backlog' END,
		       'feature', 'agent', 'auto', 'bench'
		FROM generate_series(1, 10000) n`, f.project.ID)
	if err != nil {
		b.Fatal(err)
	}
	_, err = pool.Exec(ctx, `UPDATE projects SET next_item_number = 10001 WHERE id = $1`, f.project.ID)
	if err != nil {
		b.Fatal(err)
	}
	// Edges n → n+k for k in 1, 7, 31 go from lower to higher numbers: a DAG.
	_, err = pool.Exec(ctx, `
		INSERT INTO dependencies (project_id, from_item_id, to_item_id, type, created_by)
		SELECT $1, f.id, t.id, 'blocks', 'bench'
		FROM (SELECT n, k FROM generate_series(1, 10000) n, (VALUES (1), (7), (31)) s(k)
		      WHERE n + k <= 10000 ORDER BY k, n LIMIT 20000) e
		JOIN items f ON f.project_id = $1 AND f.number = e.n
		JOIN items t ON t.project_id = $1 AND t.number = e.n + e.k`, f.project.ID)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE items; ANALYZE dependencies`); err != nil {
		b.Fatal(err)
	}
	if n := f.count(b, `SELECT count(*) FROM dependencies`); n != 20000 {
		b.Fatalf("%d dependencies, want 20000", n)
	}
	var runnable int
	b.ResetTimer()
	for b.Loop() {
		items, err := f.db.Runnable(ctx, f.viewer, "WEB")
		if err != nil {
			b.Fatal(err)
		}
		runnable = len(items)
	}
	b.ReportMetric(float64(runnable), "runnable")
}
