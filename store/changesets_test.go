package store_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/balletplanner/ballet/store"
)

func createOp(ref, kind, title string) store.Operation {
	return store.Operation{Kind: store.OpCreateItem, Ref: ref, Create: &store.NewItem{Kind: kind, Title: title}}
}

func depOp(from, to, typ string) store.Operation {
	return store.Operation{Kind: store.OpAddDependency, Dependency: &store.DependencySpec{From: from, To: to, Type: typ}}
}

func updateOp(item string, p store.ItemPatch) store.Operation {
	return store.Operation{Kind: store.OpUpdateItem, Update: &store.ItemUpdate{Item: item, ItemPatch: p}}
}

func TestChangesetProposeApply(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newTrackerFixture(t)
	existing := f.create(t, store.NewItem{Kind: store.KindTicket, Title: "existing"})
	epic := createOp("api", store.KindEpic, "API")
	ticket := createOp("login", store.KindTicket, "Login")
	ticket.Create.Epic = "$api"
	p := store.Proposal{Title: "API work", Summary: "why", Operations: []store.Operation{
		epic,   // 0
		ticket, // 1
		updateOp(existing.Key, store.ItemPatch{Epic: ptr("$api")}), // 2
		depOp("$login", existing.Key, store.DependencyBlocks),      // 3
		createOp("", store.KindTicket, "Skipped"),                  // 4
	}}
	cs, err := f.db.ProposeChangeset(ctx, f.planner, "WEB", p)
	if err != nil {
		t.Fatal(err)
	}
	if cs.Status != store.ChangesetProposed || cs.ProposedBy.Kind != store.ActorService ||
		cs.ProposedBy.ActingFor != "eng@example.com" || cs.SessionID == "" || cs.Operations[2].Update.Version != 1 {
		t.Fatalf("proposed = %+v", cs)
	}
	// The trial run left nothing behind but the changeset and its event.
	if n := f.count(t, `SELECT count(*) FROM items`); n != 1 {
		t.Fatalf("items after propose = %d, want 1", n)
	}
	if n := f.count(t, `SELECT next_item_number FROM projects WHERE key = 'WEB'`); n != 2 {
		t.Fatalf("next number after propose = %d, want 2", n)
	}
	_, err = f.db.ApplyChangeset(ctx, f.planner, cs.ID, []int{0, 1, 2, 3})
	wantErr(t, err, store.CodeForbidden, "only a human may apply a changeset")
	_, err = f.db.ApplyChangeset(ctx, f.viewer, cs.ID, []int{0})
	wantErr(t, err, store.CodeForbidden, "tracker.write")
	_, err = f.db.ApplyChangeset(ctx, f.outsider, cs.ID, []int{0})
	wantErr(t, err, store.CodeNotFound, "not found")
	_, err = f.db.ApplyChangeset(ctx, f.engineer, cs.ID, []int{1, 3})
	wantErr(t, err, store.CodeInvalid, "operations[1]: create.epic uses $api, created by operations[0], which is not chosen")

	applied, err := f.db.ApplyChangeset(ctx, f.engineer, cs.ID, []int{3, 0, 1, 2})
	if err != nil {
		t.Fatal(err)
	}
	r := applied.Results
	if applied.Status != store.ChangesetApplied || len(r) != 5 || r[0].Item != "WEB-2" || r[1].Item != "WEB-3" ||
		r[2].Item != existing.Key || r[2].Version != 2 || r[3].Dependency == "" || r[4].Status != store.ResultSkipped {
		t.Fatalf("applied = %+v", applied)
	}
	login, err := f.db.GetItem(ctx, f.viewer, "WEB-3")
	if err != nil || login.Epic != "WEB-2" || login.Title != "Login" {
		t.Fatalf("login = %+v, %v", login, err)
	}
	got, err := f.db.GetChangeset(ctx, f.viewer, cs.ID)
	if err != nil || got.Status != store.ChangesetApplied || got.DecidedBy != "eng@example.com" || len(got.AppliedOperations) != 4 {
		t.Fatalf("get = %+v, %v", got, err)
	}
	before := f.snapshot(t)
	_, err = f.db.ApplyChangeset(ctx, f.engineer, cs.ID, []int{4})
	wantErr(t, err, store.CodeConflict, "is already applied")
	_, err = f.db.RejectChangeset(ctx, f.engineer, cs.ID, "")
	wantErr(t, err, store.CodeConflict, "is already applied")
	if f.snapshot(t) != before {
		t.Fatal("decided changeset changed")
	}
	var evs []string
	rows, _ := f.db.Pool().Query(ctx, `SELECT type FROM events WHERE payload->>'changeset' = $1 OR entity_id = $1 ORDER BY seq`, cs.ID)
	for rows.Next() {
		var s string
		_ = rows.Scan(&s)
		evs = append(evs, s)
	}
	if want := "changeset.proposed item.created item.created item.updated dependency.added changeset.applied"; strings.Join(evs, " ") != want {
		t.Fatalf("events = %v, want %s", evs, want)
	}
	list, err := f.db.ListChangesets(ctx, f.viewer, "WEB", store.ChangesetApplied)
	if err != nil || len(list) != 1 {
		t.Fatalf("list applied = %v, %v", list, err)
	}
	list, err = f.db.ListChangesets(ctx, f.viewer, "WEB", store.ChangesetProposed)
	if err != nil || len(list) != 0 {
		t.Fatalf("list proposed = %v, %v", list, err)
	}
}

func TestChangesetProposeRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newTrackerFixture(t)
	a := f.create(t, store.NewItem{Kind: store.KindTicket}).Key // WEB-1
	b := f.create(t, store.NewItem{Kind: store.KindTicket}).Key // WEB-2
	if _, err := f.db.AddDependency(ctx, f.engineer, a, b, store.DependencyBlocks); err != nil {
		t.Fatal(err)
	}
	ops := func(o ...store.Operation) store.Proposal { return store.Proposal{Title: "t", Operations: o} }
	withPolicy := createOp("x", store.KindTicket, "x")
	withPolicy.Create.Policy = &store.Policy{MergeMode: "manual"}
	tooMany := make([]store.Operation, 201)
	for i := range tooMany {
		tooMany[i] = createOp("", store.KindTicket, "x")
	}
	tests := []struct {
		name   string
		caller store.Caller
		p      store.Proposal
		code   store.Code
		msg    string
	}{
		{"no operations", f.engineer, ops(), store.CodeInvalid, "operations: must hold 1 to 200 operations, got 0"},
		{"too many operations", f.engineer, ops(tooMany...), store.CodeInvalid, "got 201"},
		{"empty title", f.engineer, store.Proposal{Operations: []store.Operation{createOp("", "ticket", "x")}}, store.CodeInvalid, "title: must not be empty"},
		{"long title", f.engineer, store.Proposal{Title: strings.Repeat("t", 301), Operations: []store.Operation{createOp("", "ticket", "x")}}, store.CodeInvalid, "title: must be at most 300"},
		{"unknown kind", f.engineer, ops(createOp("", "ticket", "x"), store.Operation{Kind: "delete_item"}), store.CodeInvalid, `operations[1]: kind: must be one of create_item, update_item, add_dependency`},
		{"payload mismatch", f.engineer, ops(store.Operation{Kind: store.OpCreateItem, Dependency: &store.DependencySpec{}}), store.CodeInvalid, `operations[0]: a create_item operation carries exactly one payload, "create"`},
		{"bad ref", f.engineer, ops(createOp("Bad Ref", "ticket", "x")), store.CodeInvalid, "operations[0]: ref: must match"},
		{"duplicate ref", f.engineer, ops(createOp("a", "ticket", "x"), createOp("a", "ticket", "y")), store.CodeInvalid, "operations[1]: ref: $a is already defined by operations[0]"},
		{"forward ref", f.engineer, ops(depOp("$later", a, "blocks"), createOp("later", "ticket", "x")), store.CodeInvalid, "operations[0]: dependency.from: unknown reference $later"},
		{"two updates of one item", f.engineer, ops(updateOp(a, store.ItemPatch{Title: ptr("1")}), updateOp(a, store.ItemPatch{Title: ptr("2")})), store.CodeInvalid, "operations[1]: update.item: WEB-1 is already updated by operations[0]"},
		{"invalid kind of item", f.engineer, ops(createOp("", "ticket", "x"), createOp("", "story", "y")), store.CodeInvalid, `operations[1]: kind: must be one of milestone, epic, ticket`},
		{"title too long", f.engineer, ops(createOp("", "ticket", "x"), createOp("", "ticket", "x"), createOp("", "ticket", "x"), createOp("", "ticket", strings.Repeat("t", 301))), store.CodeInvalid, "operations[3]: title: must be at most 300"},
		{"cycle with existing", f.engineer, ops(depOp(b, a, "blocks")), store.CodeInvalid, "operations[0]: dependency cycle: WEB-2 → WEB-1 → WEB-2"},
		{"cycle within", f.engineer, ops(createOp("x", "ticket", "x"), depOp("$x", a, "blocks"), depOp(b, "$x", "blocks")), store.CodeInvalid, "operations[2]: dependency cycle: WEB-2 → WEB-3 → WEB-1 → WEB-2"},
		{"duplicate dependency", f.engineer, ops(depOp(a, b, "blocks")), store.CodeInvalid, "operations[0]: dependency WEB-1 blocks WEB-2 already exists"},
		{"duplicate within", f.engineer, ops(createOp("x", "ticket", "x"), depOp("$x", a, "relates"), depOp(a, "$x", "relates")), store.CodeInvalid, "operations[2]: dependency WEB-1 relates WEB-3 already exists"},
		{"epic is a ticket", f.engineer, ops(createOp("x", "ticket", "x"), store.Operation{Kind: store.OpCreateItem, Create: &store.NewItem{Kind: "ticket", Title: "y", Epic: "$x"}}), store.CodeInvalid, "operations[1]: epic: WEB-3 is a ticket, not a epic"},
		{"unknown item", f.engineer, ops(updateOp("WEB-99", store.ItemPatch{Title: ptr("x")})), store.CodeInvalid, "operations[0]: update.item: no item WEB-99 in project WEB"},
		{"stale version", f.engineer, ops(store.Operation{Kind: store.OpUpdateItem, Update: &store.ItemUpdate{Item: a, Version: 9, ItemPatch: store.ItemPatch{Title: ptr("x")}}}), store.CodeConflict, "operations[0]: WEB-1 has changed since"},
		{"planner sets a policy", f.planner, ops(createOp("", "ticket", "x"), withPolicy), store.CodeInvalid, "operations[1]: policy: the planner may not set a policy"},
		{"viewer", f.viewer, ops(createOp("", "ticket", "x")), store.CodeForbidden, "tracker.write"},
		{"another organization", f.outsider, ops(createOp("", "ticket", "x")), store.CodeNotFound, "not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := f.snapshot(t)
			_, err := f.db.ProposeChangeset(ctx, tt.caller, "WEB", tt.p)
			wantErr(t, err, tt.code, tt.msg)
			if f.snapshot(t) != before {
				t.Fatal("refusal wrote something")
			}
		})
	}
	// A human may set a policy.
	if _, err := f.db.ProposeChangeset(ctx, f.engineer, "WEB", ops(withPolicy)); err != nil {
		t.Fatal(err)
	}
}

func TestChangesetApplyRefusesStaleUpdate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newTrackerFixture(t)
	it := f.create(t, store.NewItem{Kind: store.KindTicket, Title: "mine"})
	cs, err := f.db.ProposeChangeset(ctx, f.planner, "WEB", store.Proposal{Title: "t", Operations: []store.Operation{
		createOp("", store.KindTicket, "new"),
		updateOp(it.Key, store.ItemPatch{Title: ptr("planner's title")}),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.UpdateItem(ctx, f.engineer, it.Key, 1, store.ItemPatch{Title: ptr("human's title")}); err != nil {
		t.Fatal(err)
	}
	before := f.snapshot(t)
	_, err = f.db.ApplyChangeset(ctx, f.engineer, cs.ID, []int{0, 1})
	wantErr(t, err, store.CodeConflict, "operations[1]: WEB-1 has changed since the changeset was proposed (proposed against version 1, now version 2)")
	var se *store.Error
	if !errors.As(err, &se) || se.Details["operation"] != 1 {
		t.Fatalf("details = %v", err)
	}
	if f.snapshot(t) != before {
		t.Fatal("refused apply wrote something")
	}
	// The other operation alone still applies; then reject is a conflict.
	if _, err := f.db.ApplyChangeset(ctx, f.engineer, cs.ID, []int{0}); err != nil {
		t.Fatal(err)
	}
	got, _ := f.db.GetItem(ctx, f.viewer, it.Key)
	if got.Title != "human's title" {
		t.Fatalf("title = %q: the human's edit was overwritten", got.Title)
	}
}

func TestChangesetReject(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newTrackerFixture(t)
	cs, err := f.db.ProposeChangeset(ctx, f.planner, "WEB", store.Proposal{Title: "t",
		Operations: []store.Operation{createOp("", store.KindTicket, "x")}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.db.RejectChangeset(ctx, f.planner, cs.ID, "")
	wantErr(t, err, store.CodeForbidden, "only a human may reject a changeset")
	out, err := f.db.RejectChangeset(ctx, f.engineer, cs.ID, "not now")
	if err != nil || out.Status != store.ChangesetRejected || out.DecidedAt == nil {
		t.Fatalf("reject = %+v, %v", out, err)
	}
	_, err = f.db.ApplyChangeset(ctx, f.engineer, cs.ID, []int{0})
	wantErr(t, err, store.CodeConflict, "is already rejected")
	if n := f.count(t, `SELECT count(*) FROM events WHERE type = 'changeset.rejected' AND payload->>'reason' = 'not now'`); n != 1 {
		t.Fatalf("rejected events = %d", n)
	}
}

func TestChangesetConcurrentApplyExactlyOne(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newTrackerFixture(t)
	for round := range 5 {
		cs, err := f.db.ProposeChangeset(ctx, f.engineer, "WEB", store.Proposal{Title: "t",
			Operations: []store.Operation{createOp("a", store.KindTicket, "a"), createOp("b", store.KindTicket, "b"),
				depOp("$a", "$b", store.DependencyBlocks)}})
		if err != nil {
			t.Fatal(err)
		}
		start := make(chan struct{})
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, errs[i] = f.db.ApplyChangeset(ctx, f.engineer, cs.ID, []int{0, 1, 2})
			}()
		}
		close(start)
		wg.Wait()
		ok := 0
		for _, err := range errs {
			if err == nil {
				ok++
			} else {
				wantErr(t, err, store.CodeConflict, "is already applied")
			}
		}
		if ok != 1 {
			t.Fatalf("round %d: %d applies succeeded (%v), want 1", round, ok, errs)
		}
	}
	if n := f.count(t, `SELECT count(*) FROM items`); n != 10 {
		t.Fatalf("items = %d, want 10", n)
	}
}
