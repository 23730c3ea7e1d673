package store_test

import (
	"context"
	"testing"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
)

// BenchmarkSearchItems searches 10,000 tickets of one project as an
// engineer bound to it (hybrid: full text + trigram, fused), 20 results.
func BenchmarkSearchItems(b *testing.B) {
	ctx := context.Background()
	db := storetest.New(b)
	sys := store.SystemActor()
	org, err := db.CreateOrganization(ctx, "bench", "Bench", sys)
	if err != nil {
		b.Fatal(err)
	}
	p, err := db.CreateProject(ctx, org.ID, "DEMO", "Demo", sys)
	if err != nil {
		b.Fatal(err)
	}
	_, err = db.Pool().Exec(ctx, `
		INSERT INTO items (project_id, number, key, kind, title, description, state, type, review_mode, merge_mode, created_by)
		SELECT $1, n, 'DEMO-' || n, 'ticket',
		       initcap(w[1 + n % 13]) || ' ' || w[1 + (n / 13) % 13] || ' ' || v[1 + n % 7] || ' ' || n,
		       'As a user I want the ' || w[1 + (n / 7) % 13] || ' to ' || v[1 + (n / 3) % 7] || ' the ' ||
		       w[1 + (n / 11) % 13] || ' so that the ' || w[1 + (n / 17) % 13] || ' works. ' || repeat('Details follow. ', 10),
		       'backlog', 'feature', 'agent', 'auto', 'bench'
		FROM generate_series(1, 10000) AS n,
		     (SELECT ARRAY['login', 'checkout', 'payment', 'search', 'profile', 'invoice', 'cart', 'catalog',
		                   'notification', 'dashboard', 'export', 'authentication', 'onboarding'] AS w,
		             ARRAY['redesign', 'fix', 'speed up', 'localize', 'document', 'test', 'refactor'] AS v) words`, p.ID)
	if err != nil {
		b.Fatal(err)
	}
	// VACUUM flushes the GIN pending lists, as autovacuum does in steady state.
	if _, err := db.Pool().Exec(ctx, `VACUUM ANALYZE items`); err != nil {
		b.Fatal(err)
	}
	caller := store.HumanCaller(&store.Principal{Subject: "bench", Kind: store.ActorHuman, Bindings: []store.RoleBinding{{
		Role: store.RoleEngineer, Scope: store.Scope{Kind: store.ScopeProject, OrganizationID: org.ID, ProjectID: p.ID}}}})
	for _, bc := range []struct{ name, q string }{
		{"fulltext", "payment refactor"},
		{"key", "demo-4242"},
		{"typo", "authentcation"},
		{"metachars", `"checkout' & !cart:*`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				hits, err := db.Search(ctx, caller, store.SearchQuery{Q: bc.q, Kind: store.SearchItems, Project: "DEMO"})
				if err != nil {
					b.Fatal(err)
				}
				if len(hits) == 0 {
					b.Fatalf("no hits for %q", bc.q)
				}
			}
		})
	}
}
