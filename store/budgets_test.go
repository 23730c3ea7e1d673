package store_test

import (
	"context"
	"testing"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
)

func TestEffectiveLimitsMergeProjectOverOrganization(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	org, project := llmTenant(t, db)
	n := func(v int64) *int64 { return &v }

	l, err := db.EffectiveLimits(ctx, org, project)
	if err != nil || !l.Unlimited() {
		t.Fatalf("no rows: %+v, %v", l, err)
	}
	if _, err := db.PutLimits(ctx, store.Limits{OrganizationID: org, TokenBudget: n(1000), BudgetPeriod: store.BudgetDay,
		RequestsPerMinute: n(60), UpdatedBy: "alice"}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.PutLimits(ctx, store.Limits{OrganizationID: org, ProjectID: project, RequestsPerMinute: n(5),
		TokensPerMinute: n(500), UpdatedBy: "alice"}); err != nil {
		t.Fatal(err)
	}
	l, err = db.EffectiveLimits(ctx, org, project)
	if err != nil {
		t.Fatal(err)
	}
	if *l.TokenBudget != 1000 || l.BudgetPeriod != store.BudgetDay || *l.RequestsPerMinute != 5 || *l.TokensPerMinute != 500 {
		t.Fatalf("effective = %+v", l)
	}
	orgOnly, err := db.EffectiveLimits(ctx, org, "")
	if err != nil || *orgOnly.RequestsPerMinute != 60 || orgOnly.TokensPerMinute != nil {
		t.Fatalf("organization = %+v, %v", orgOnly, err)
	}
	got, err := db.GetLimits(ctx, org, project)
	if err != nil || *got.RequestsPerMinute != 5 || got.TokenBudget != nil {
		t.Fatalf("get = %+v, %v", got, err)
	}
	if _, err := db.PutLimits(ctx, store.Limits{OrganizationID: org, BudgetPeriod: "year"}); !store.IsCode(err, store.CodeInvalid) {
		t.Fatalf("bad period: %v", err)
	}
	if err := db.DeleteLimits(ctx, org, project); err != nil {
		t.Fatal(err)
	}
	if _, err := db.GetLimits(ctx, org, project); !store.IsCode(err, store.CodeNotFound) {
		t.Fatalf("after delete: %v", err)
	}
}

// TestBudgetScopesMergeAsEffectiveLimits lists the budgeted scopes the way
// EffectiveLimits merges limits: a project's own budget wins, a project
// without one takes its organization's default, an organization's budget
// is also a scope of its own, and limits without a budget name no scope.
func TestBudgetScopesMergeAsEffectiveLimits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	n := func(v int64) *int64 { return &v }
	org, own := llmTenant(t, db)
	var inherits, rateOnly string
	for key, id := range map[string]*string{"INH": &inherits, "RATE": &rateOnly} {
		if err := db.Pool().QueryRow(ctx, `INSERT INTO projects (organization_id, key, name) VALUES ($1, $2, $2) RETURNING id::text`,
			org, key).Scan(id); err != nil {
			t.Fatal(err)
		}
	}
	unbudgetedOrg, unbudgetedProject := llmTenant2(t, db)
	for _, l := range []store.Limits{
		{OrganizationID: org, TokenBudget: n(1000), BudgetPeriod: store.BudgetWeek},
		{OrganizationID: org, ProjectID: own, TokenBudget: n(5_000_000), BudgetPeriod: store.BudgetDay, BudgetUnit: store.BudgetMicroUSD},
		{OrganizationID: org, ProjectID: rateOnly, RequestsPerMinute: n(5)},
		{OrganizationID: unbudgetedOrg, RequestsPerMinute: n(60)},
	} {
		if _, err := db.PutLimits(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	got, err := db.BudgetScopes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]store.BudgetScope{}
	for _, s := range got {
		if _, dup := byID[s.ScopeID]; dup {
			t.Fatalf("scope %s listed twice: %+v", s.ScopeID, got)
		}
		byID[s.ScopeID] = s
	}
	tests := []struct {
		name string
		id   string
		want *store.BudgetScope // nil: not budgeted
	}{
		{"a project's own budget wins", own,
			&store.BudgetScope{ScopeID: own, Budget: 5_000_000, Period: store.BudgetDay, Unit: store.BudgetMicroUSD}},
		{"a project without limits takes the organization's default", inherits,
			&store.BudgetScope{ScopeID: inherits, Budget: 1000, Period: store.BudgetWeek, Unit: store.BudgetTokens}},
		{"a project whose limits set no budget takes the organization's default", rateOnly,
			&store.BudgetScope{ScopeID: rateOnly, Budget: 1000, Period: store.BudgetWeek, Unit: store.BudgetTokens}},
		{"the organization's budget limits its own calls", org,
			&store.BudgetScope{ScopeID: org, Organization: true, Budget: 1000, Period: store.BudgetWeek, Unit: store.BudgetTokens}},
		{"an organization with only rate limits is not budgeted", unbudgetedOrg, nil},
		{"its project is not budgeted", unbudgetedProject, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, ok := byID[tc.id]
			switch {
			case tc.want == nil && ok:
				t.Fatalf("listed %+v, want no budget", s)
			case tc.want != nil && s != *tc.want:
				t.Fatalf("got %+v (listed %v), want %+v", s, ok, *tc.want)
			}
		})
	}
	if len(byID) != 4 {
		t.Fatalf("%d scopes listed, want 4: %+v", len(got), got)
	}
}
