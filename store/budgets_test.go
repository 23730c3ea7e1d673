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
