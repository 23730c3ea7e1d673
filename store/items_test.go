package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
)

// trackerFixture is a database with organization acme / project WEB, the
// other organization globex / project GLX, and callers of each role.
type trackerFixture struct {
	db                         *store.DB
	org, otherOrg              store.Organization
	project, otherProject      store.Project
	engineer, viewer, outsider store.Caller
	planner                    store.Caller
	otherEngineer              store.Caller
}

func newTrackerFixture(t testing.TB) *trackerFixture {
	t.Helper()
	ctx := context.Background()
	db := storetest.New(t)
	f := &trackerFixture{db: db}
	var err error
	sys := store.SystemActor()
	if f.org, err = db.CreateOrganization(ctx, "acme", "Acme", sys); err != nil {
		t.Fatal(err)
	}
	if f.project, err = db.CreateProject(ctx, f.org.ID, "WEB", "Web", sys); err != nil {
		t.Fatal(err)
	}
	if f.otherOrg, err = db.CreateOrganization(ctx, "globex", "Globex", sys); err != nil {
		t.Fatal(err)
	}
	if f.otherProject, err = db.CreateProject(ctx, f.otherOrg.ID, "GLX", "Globex", sys); err != nil {
		t.Fatal(err)
	}
	bound := func(subject string, role store.Role, scope store.Scope) *store.Principal {
		return &store.Principal{Subject: subject, Kind: store.ActorHuman,
			Bindings: []store.RoleBinding{{Subject: subject, Role: role, Scope: scope}}}
	}
	webScope := store.Scope{Kind: store.ScopeProject, OrganizationID: f.org.ID, ProjectID: f.project.ID}
	eng := bound("eng@example.com", store.RoleEngineer, webScope)
	f.engineer = store.HumanCaller(eng)
	f.viewer = store.HumanCaller(bound("viewer@example.com", store.RoleViewer, webScope))
	f.outsider = store.HumanCaller(bound("out@example.com", store.RoleOrganizationAdmin,
		store.Scope{Kind: store.ScopeOrganization, OrganizationID: f.otherOrg.ID}))
	f.otherEngineer = store.HumanCaller(bound("glx@example.com", store.RoleEngineer,
		store.Scope{Kind: store.ScopeOrganization, OrganizationID: f.otherOrg.ID}))
	f.planner = store.Caller{Principal: eng, Actor: store.PlannerActor("7b0c7c43-8d6b-4a53-9a43-0c9a0c0d7d11", eng.Subject)}
	return f
}

// create makes an item or fails the test.
func (f *trackerFixture) create(t testing.TB, in store.NewItem) store.Item {
	t.Helper()
	if in.Title == "" {
		in.Title = "a " + in.Kind
	}
	it, err := f.db.CreateItem(context.Background(), f.engineer, "WEB", in)
	if err != nil {
		t.Fatal(err)
	}
	return it
}

// count returns a count(*) query's answer.
func (f *trackerFixture) count(t testing.TB, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := f.db.Pool().QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// snapshot counts what a refused write must leave untouched.
func (f *trackerFixture) snapshot(t testing.TB) string {
	t.Helper()
	return fmt.Sprint(
		f.count(t, `SELECT count(*) FROM items`),
		f.count(t, `SELECT count(*) FROM dependencies`),
		f.count(t, `SELECT count(*) FROM changesets`),
		f.count(t, `SELECT count(*) FROM events`),
		f.count(t, `SELECT COALESCE(sum(version), 0) FROM items`),
		f.count(t, `SELECT next_item_number FROM projects WHERE key = 'WEB'`),
		f.count(t, `SELECT count(*) FROM changesets WHERE status <> 'proposed'`))
}

// wantErr fails unless err has the code and its message contains msg.
func wantErr(t testing.TB, err error, code store.Code, msg string) {
	t.Helper()
	if !store.IsCode(err, code) || !strings.Contains(err.Error(), msg) {
		t.Fatalf("err = %v, want %s containing %q", err, code, msg)
	}
}

func ptr[T any](v T) *T { return &v }

func TestCreateItemConcurrentKeysNeverRepeatOrSkip(t *testing.T) {
	t.Parallel()
	f := newTrackerFixture(t)
	const n = 50
	keys := make([]string, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			it, err := f.db.CreateItem(context.Background(), f.engineer, "WEB",
				store.NewItem{Kind: store.KindTicket, Title: fmt.Sprintf("ticket %d", i)})
			if err != nil {
				errs <- err
				return
			}
			keys[i] = it.Key
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var want []string
	for i := 1; i <= n; i++ {
		want = append(want, fmt.Sprintf("WEB-%d", i))
	}
	slices.Sort(keys)
	slices.Sort(want)
	if !slices.Equal(keys, want) {
		t.Fatalf("keys = %v, want WEB-1..WEB-%d each once", keys, n)
	}
	if got := f.count(t, `SELECT count(*) FROM events WHERE type = 'item.created'`); got != n {
		t.Fatalf("item.created events = %d, want %d", got, n)
	}
	// A refused create does not consume a number.
	if _, err := f.db.CreateItem(context.Background(), f.engineer, "WEB", store.NewItem{Kind: "story", Title: "x"}); err == nil {
		t.Fatal("invalid kind accepted")
	}
	if it := f.create(t, store.NewItem{Kind: store.KindTicket}); it.Key != "WEB-51" {
		t.Fatalf("next key = %s, want WEB-51", it.Key)
	}
}

func TestCreateItemDefaultsAndRefs(t *testing.T) {
	t.Parallel()
	f := newTrackerFixture(t)
	ms := f.create(t, store.NewItem{Kind: store.KindMilestone})
	epic := f.create(t, store.NewItem{Kind: store.KindEpic, Milestone: ms.Key})
	tk := f.create(t, store.NewItem{Kind: store.KindTicket, Title: "Login", Epic: epic.Key, Milestone: ms.Key,
		AcceptanceCriteria: []string{"works"}, Policy: &store.Policy{MergeMode: "manual"}})
	if epic.State != store.StateOpen || epic.Milestone != ms.Key || epic.Policy != nil || epic.Type != "" {
		t.Fatalf("epic = %+v", epic)
	}
	if tk.State != store.StateBacklog || tk.Type != "feature" || tk.Epic != epic.Key ||
		*tk.Policy != (store.Policy{ReviewMode: "agent", MergeMode: "manual"}) || tk.Version != 1 {
		t.Fatalf("ticket = %+v", tk)
	}
	got, err := f.db.GetItem(context.Background(), f.viewer, tk.Key)
	if err != nil || got.Epic != epic.Key || got.Milestone != ms.Key || !slices.Equal(got.AcceptanceCriteria, []string{"works"}) {
		t.Fatalf("get = %+v, %v", got, err)
	}
	list, err := f.db.ListItems(context.Background(), f.viewer, "WEB", store.ItemFilter{Epic: epic.Key})
	if err != nil || len(list) != 1 || list[0].Key != tk.Key {
		t.Fatalf("list by epic = %v, %v", list, err)
	}
	list, err = f.db.ListItems(context.Background(), f.viewer, "WEB", store.ItemFilter{Milestone: ms.Key})
	if err != nil || len(list) != 2 {
		t.Fatalf("list by milestone = %v, %v", list, err)
	}
}

func TestCreateItemRefusals(t *testing.T) {
	t.Parallel()
	f := newTrackerFixture(t)
	epic := f.create(t, store.NewItem{Kind: store.KindEpic})
	ticket := f.create(t, store.NewItem{Kind: store.KindTicket})
	glx, err := f.db.CreateItem(context.Background(), f.otherEngineer, "GLX", store.NewItem{Kind: store.KindEpic, Title: "theirs"})
	if err != nil {
		t.Fatal(err)
	}
	many := make([]string, 51)
	for i := range many {
		many[i] = "c"
	}
	tests := []struct {
		name   string
		caller store.Caller
		in     store.NewItem
		code   store.Code
		msg    string
	}{
		{"invalid kind", f.engineer, store.NewItem{Kind: "story", Title: "x"}, store.CodeInvalid, `kind: must be one of milestone, epic, ticket, got "story"`},
		{"empty title", f.engineer, store.NewItem{Kind: "ticket", Title: "  "}, store.CodeInvalid, "title: must not be empty"},
		{"title too long", f.engineer, store.NewItem{Kind: "ticket", Title: strings.Repeat("é", 301)}, store.CodeInvalid, "title: must be at most 300 characters, got 301"},
		{"description too long", f.engineer, store.NewItem{Kind: "ticket", Title: "x", Description: strings.Repeat("d", 50001)}, store.CodeInvalid, "description: must be at most 50000"},
		{"invalid type", f.engineer, store.NewItem{Kind: "ticket", Title: "x", Type: "chore"}, store.CodeInvalid, `type: must be one of feature, bug, tech_debt, docs, spike, got "chore"`},
		{"invalid review mode", f.engineer, store.NewItem{Kind: "ticket", Title: "x", Policy: &store.Policy{ReviewMode: "human"}}, store.CodeInvalid, "policy.review_mode: must be one of agent, agent+human"},
		{"too many criteria", f.engineer, store.NewItem{Kind: "ticket", Title: "x", AcceptanceCriteria: many}, store.CodeInvalid, "acceptance_criteria: at most 50 entries, got 51"},
		{"criterion too long", f.engineer, store.NewItem{Kind: "ticket", Title: "x", AcceptanceCriteria: []string{"ok", strings.Repeat("c", 2001)}}, store.CodeInvalid, "acceptance_criteria[1]: must be at most 2000"},
		{"type on epic", f.engineer, store.NewItem{Kind: "epic", Title: "x", Type: "bug"}, store.CodeInvalid, "type: only tickets have a type"},
		{"epic on epic", f.engineer, store.NewItem{Kind: "epic", Title: "x", Epic: epic.Key}, store.CodeInvalid, "epic: only tickets belong to an epic"},
		{"epic is a ticket", f.engineer, store.NewItem{Kind: "ticket", Title: "x", Epic: ticket.Key}, store.CodeInvalid, "epic: WEB-2 is a ticket, not a epic"},
		{"epic of another project", f.engineer, store.NewItem{Kind: "ticket", Title: "x", Epic: glx.Key}, store.CodeInvalid, "epic: no item GLX-1 in project WEB"},
		{"milestone unknown", f.engineer, store.NewItem{Kind: "ticket", Title: "x", Milestone: "WEB-99"}, store.CodeInvalid, "milestone: no item WEB-99 in project WEB"},
		{"viewer", f.viewer, store.NewItem{Kind: "ticket", Title: "x"}, store.CodeForbidden, "needs tracker.write"},
		{"another organization", f.outsider, store.NewItem{Kind: "ticket", Title: "x"}, store.CodeNotFound, "not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := f.snapshot(t)
			_, err := f.db.CreateItem(context.Background(), tt.caller, "WEB", tt.in)
			wantErr(t, err, tt.code, tt.msg)
			if after := f.snapshot(t); after != before {
				t.Fatalf("refusal wrote something: %s → %s", before, after)
			}
		})
	}
}

func TestUpdateItemVersionsAndEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newTrackerFixture(t)
	epic := f.create(t, store.NewItem{Kind: store.KindEpic})
	tk := f.create(t, store.NewItem{Kind: store.KindTicket, Title: "old"})
	up, err := f.db.UpdateItem(ctx, f.engineer, tk.Key, 1, store.ItemPatch{Title: ptr("new"), Epic: ptr(epic.Key),
		Policy: &store.Policy{ReviewMode: "agent+human"}})
	if err != nil || up.Version != 2 || up.Title != "new" || up.Epic != epic.Key || up.Policy.ReviewMode != "agent+human" || up.Policy.MergeMode != "auto" {
		t.Fatalf("update = %+v, %v", up, err)
	}
	before := f.snapshot(t)
	_, err = f.db.UpdateItem(ctx, f.engineer, tk.Key, 1, store.ItemPatch{Title: ptr("lost")})
	wantErr(t, err, store.CodeConflict, "you sent version 1, the current version is 2")
	var se *store.Error
	if !errors.As(err, &se) || se.Details["current_version"] != int64(2) {
		t.Fatalf("conflict details = %v", err)
	}
	if f.snapshot(t) != before {
		t.Fatal("stale update wrote something")
	}
	cleared, err := f.db.UpdateItem(ctx, f.engineer, tk.Key, 2, store.ItemPatch{Epic: ptr("")})
	if err != nil || cleared.Epic != "" || cleared.Version != 3 {
		t.Fatalf("clear epic = %+v, %v", cleared, err)
	}
	_, err = f.db.UpdateItem(ctx, f.engineer, tk.Key, 3, store.ItemPatch{})
	wantErr(t, err, store.CodeInvalid, "nothing to change")
	_, err = f.db.UpdateItem(ctx, f.engineer, epic.Key, 1, store.ItemPatch{Type: ptr("bug")})
	wantErr(t, err, store.CodeInvalid, "type: only tickets have a type")
	hist, err := f.db.ItemHistory(ctx, f.viewer, tk.Key)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range hist {
		types = append(types, e.Type)
	}
	if !slices.Equal(types, []string{"item.created", "item.updated", "item.updated"}) {
		t.Fatalf("history = %v", types)
	}
	var payload struct {
		Key     string
		Changes map[string]struct{ From, To any }
	}
	if err := json.Unmarshal(hist[1].Payload, &payload); err != nil {
		t.Fatal(err)
	}
	if hist[1].Actor.Subject != "eng@example.com" || payload.Key != tk.Key ||
		payload.Changes["title"].From != "old" || payload.Changes["title"].To != "new" || payload.Changes["epic"].To != epic.Key {
		t.Fatalf("updated event = %+v %s", hist[1], hist[1].Payload)
	}
}

func TestTransitionStateMachine(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newTrackerFixture(t)
	tests := []struct {
		kind string
		path []string // states to move through from the initial one
		bad  string   // then a refused move
		msg  string
	}{
		{store.KindTicket, nil, "in_progress", "transition not allowed: backlog → in_progress"},
		{store.KindTicket, []string{"ready", "paused", "done", "backlog", "cancelled", "backlog"}, "paused", "transition not allowed: backlog → paused"},
		{store.KindTicket, []string{"ready"}, "ready", "transition not allowed: ready → ready"},
		{store.KindTicket, []string{"done"}, "ready", "transition not allowed: done → ready"},
		{store.KindTicket, nil, "open", `state: must be one of backlog, ready`},
		{store.KindEpic, []string{"done", "open", "cancelled"}, "done", "transition not allowed: cancelled → done"},
		{store.KindMilestone, nil, "ready", `state: must be one of open, done, cancelled, got "ready"`},
	}
	for _, tt := range tests {
		t.Run(tt.kind+" "+strings.Join(tt.path, ",")+" "+tt.bad, func(t *testing.T) {
			it := f.create(t, store.NewItem{Kind: tt.kind})
			for _, s := range tt.path {
				var err error
				if it, err = f.db.TransitionItem(ctx, f.engineer, it.Key, s, it.Version); err != nil {
					t.Fatalf("%s: %v", s, err)
				}
			}
			before := f.snapshot(t)
			_, err := f.db.TransitionItem(ctx, f.engineer, it.Key, tt.bad, it.Version)
			wantErr(t, err, store.CodeInvalid, tt.msg)
			if f.snapshot(t) != before {
				t.Fatal("refused transition wrote something")
			}
		})
	}
	it := f.create(t, store.NewItem{Kind: store.KindTicket})
	_, err := f.db.TransitionItem(ctx, f.engineer, it.Key, "ready", 7)
	wantErr(t, err, store.CodeConflict, "current version is 1")
	_, err = f.db.TransitionItem(ctx, f.viewer, it.Key, "ready", 1)
	wantErr(t, err, store.CodeForbidden, "tracker.write")
}

func TestItemIsolation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newTrackerFixture(t)
	it := f.create(t, store.NewItem{Kind: store.KindTicket})
	_, err := f.db.GetItem(ctx, f.outsider, it.Key)
	wantErr(t, err, store.CodeNotFound, "not found")
	_, err = f.db.GetItem(ctx, f.engineer, "WEB-404")
	wantErr(t, err, store.CodeNotFound, "item WEB-404 not found")
	_, err = f.db.ListItems(ctx, f.outsider, "WEB", store.ItemFilter{})
	wantErr(t, err, store.CodeNotFound, "not found")
	_, err = f.db.UpdateItem(ctx, f.outsider, it.Key, 1, store.ItemPatch{Title: ptr("mine")})
	wantErr(t, err, store.CodeNotFound, "not found")
	_, err = f.db.ItemHistory(ctx, f.outsider, it.Key)
	wantErr(t, err, store.CodeNotFound, "not found")
	_, err = f.db.ListItems(ctx, f.viewer, "WEB", store.ItemFilter{Kind: "ticket", State: "open"})
	wantErr(t, err, store.CodeInvalid, `state: must be one of backlog`)
}
