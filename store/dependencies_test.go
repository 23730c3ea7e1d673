package store_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/balletplanner/ballet/store"
)

func TestDependencyRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newTrackerFixture(t)
	var k []string
	for range 4 {
		k = append(k, f.create(t, store.NewItem{Kind: store.KindTicket}).Key)
	}
	glx, err := f.db.CreateItem(ctx, f.otherEngineer, "GLX", store.NewItem{Kind: store.KindTicket, Title: "theirs"})
	if err != nil {
		t.Fatal(err)
	}
	// WEB-1 blocks WEB-2 blocks WEB-3; WEB-1 relates WEB-4.
	for _, e := range [][3]string{{k[0], k[1], "blocks"}, {k[1], k[2], "blocks"}, {k[0], k[3], "relates"}} {
		if _, err := f.db.AddDependency(ctx, f.engineer, e[0], e[1], e[2]); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name         string
		caller       store.Caller
		from, to, ty string
		code         store.Code
		msg          string
	}{
		{"self", f.engineer, k[0], k[0], "blocks", store.CodeInvalid, "item: an item cannot depend on itself (WEB-1)"},
		{"cycle of two", f.engineer, k[1], k[0], "blocks", store.CodeInvalid, "dependency cycle: WEB-2 → WEB-1 → WEB-2"},
		{"cycle of three", f.engineer, k[2], k[0], "blocks", store.CodeInvalid, "dependency cycle: WEB-3 → WEB-1 → WEB-2 → WEB-3"},
		{"duplicate", f.engineer, k[0], k[1], "blocks", store.CodeAlreadyExists, "dependency WEB-1 blocks WEB-2 already exists"},
		{"duplicate relates reversed", f.engineer, k[3], k[0], "relates", store.CodeAlreadyExists, "dependency WEB-4 relates WEB-1 already exists"},
		{"cross project", f.engineer, k[0], glx.Key, "blocks", store.CodeInvalid, "item: no item GLX-1 in project WEB (dependencies stay within one project)"},
		{"unknown item", f.engineer, k[0], "WEB-99", "blocks", store.CodeInvalid, "item: no item WEB-99 in project WEB"},
		{"invalid type", f.engineer, k[0], k[3], "depends", store.CodeInvalid, `type: must be one of blocks, relates, got "depends"`},
		{"viewer", f.viewer, k[0], k[3], "blocks", store.CodeForbidden, "needs tracker.write"},
		{"another organization", f.outsider, k[0], k[3], "blocks", store.CodeNotFound, "not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := f.snapshot(t)
			_, err := f.db.AddDependency(ctx, tt.caller, tt.from, tt.to, tt.ty)
			wantErr(t, err, tt.code, tt.msg)
			if f.snapshot(t) != before {
				t.Fatal("refusal wrote something")
			}
		})
	}
	deps, err := f.db.ListDependencies(ctx, f.viewer, k[1])
	if err != nil || len(deps) != 2 || deps[0].From != k[0] || deps[1].To != k[2] {
		t.Fatalf("dependencies of WEB-2 = %+v, %v", deps, err)
	}
	wantErr(t, f.db.DeleteDependency(ctx, f.viewer, deps[0].ID), store.CodeForbidden, "tracker.write")
	wantErr(t, f.db.DeleteDependency(ctx, f.outsider, deps[0].ID), store.CodeNotFound, "not found")
	wantErr(t, f.db.DeleteDependency(ctx, f.engineer, "nope"), store.CodeNotFound, "dependency nope not found")
	if err := f.db.DeleteDependency(ctx, f.engineer, deps[0].ID); err != nil {
		t.Fatal(err)
	}
	// With WEB-1 → WEB-2 gone, WEB-2 → WEB-1 closes no cycle.
	if _, err := f.db.AddDependency(ctx, f.engineer, k[1], k[0], "blocks"); err != nil {
		t.Fatal(err)
	}
	if n := f.count(t, `SELECT count(*) FROM events WHERE type IN ('dependency.added', 'dependency.removed')`); n != 5 {
		t.Fatalf("dependency events = %d, want 5", n)
	}
}

func TestDependencyConcurrentCyclicInsertsKeepDAG(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newTrackerFixture(t)
	for round := range 10 {
		a := f.create(t, store.NewItem{Kind: store.KindTicket}).Key
		b := f.create(t, store.NewItem{Kind: store.KindTicket}).Key
		start := make(chan struct{})
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i, e := range [][2]string{{a, b}, {b, a}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, errs[i] = f.db.AddDependency(ctx, f.engineer, e[0], e[1], store.DependencyBlocks)
			}()
		}
		close(start)
		wg.Wait()
		ok := 0
		for _, err := range errs {
			if err == nil {
				ok++
			} else {
				wantErr(t, err, store.CodeInvalid, "dependency cycle: ")
			}
		}
		if ok != 1 {
			t.Fatalf("round %d: %d of A→B, B→A succeeded (%v), want exactly 1", round, ok, errs)
		}
	}
	if n := f.count(t, `SELECT count(*) FROM dependencies`); n != 10 {
		t.Fatalf("dependencies = %d, want 10", n)
	}
}

func TestRunnable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newTrackerFixture(t)
	ready := func() store.Item {
		it := f.create(t, store.NewItem{Kind: store.KindTicket})
		it, err := f.db.TransitionItem(ctx, f.engineer, it.Key, store.StateReady, it.Version)
		if err != nil {
			t.Fatal(err)
		}
		return it
	}
	free := ready()                                                // WEB-1: no blockers
	blocked := ready()                                             // WEB-2: blocked by WEB-3 (ready)
	blocker := ready()                                             // WEB-3: not blocked
	doneBlocked := ready()                                         // WEB-4: blocked by WEB-5 (done)
	finished := f.create(t, store.NewItem{Kind: store.KindTicket}) // WEB-5
	related := ready()                                             // WEB-6: relates only
	_ = f.create(t, store.NewItem{Kind: store.KindTicket})         // WEB-7: backlog
	if _, err := f.db.TransitionItem(ctx, f.engineer, finished.Key, store.StateDone, 1); err != nil {
		t.Fatal(err)
	}
	for _, e := range [][3]string{
		{blocker.Key, blocked.Key, "blocks"}, {finished.Key, doneBlocked.Key, "blocks"}, {blocked.Key, related.Key, "relates"},
	} {
		if _, err := f.db.AddDependency(ctx, f.engineer, e[0], e[1], e[2]); err != nil {
			t.Fatal(err)
		}
	}
	items, err := f.db.Runnable(ctx, f.viewer, "WEB")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, it := range items {
		keys = append(keys, it.Key)
	}
	if want := []string{free.Key, blocker.Key, doneBlocked.Key, related.Key}; !slices.Equal(keys, want) {
		t.Fatalf("runnable = %v, want %v", keys, want)
	}
	if _, err := f.db.Runnable(ctx, f.outsider, "WEB"); !store.IsCode(err, store.CodeNotFound) {
		t.Fatalf("outsider runnable: err = %v, want not_found", err)
	}
}
