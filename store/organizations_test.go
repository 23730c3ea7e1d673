package store_test

import (
	"context"
	"slices"
	"testing"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
)

// tenants makes organizations "acme" (projects WEB, API) and "globex"
// (project GLX) and returns them.
func tenants(t *testing.T, db *store.DB) (acme, globex store.Organization, web, api, glx store.Project) {
	t.Helper()
	ctx := context.Background()
	sys := store.SystemActor()
	var err error
	must := func() {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	acme, err = db.CreateOrganization(ctx, "acme", "Acme", sys)
	must()
	globex, err = db.CreateOrganization(ctx, "globex", "Globex", sys)
	must()
	web, err = db.CreateProject(ctx, acme.ID, "WEB", "Web", sys)
	must()
	api, err = db.CreateProject(ctx, acme.ID, "API", "Api", sys)
	must()
	glx, err = db.CreateProject(ctx, globex.ID, "GLX", "Globex", sys)
	must()
	return acme, globex, web, api, glx
}

// eventTypes lists the types of an entity's events in order.
func eventTypes(t *testing.T, db *store.DB, entityType, id string) []string {
	t.Helper()
	evs, err := db.EntityEvents(context.Background(), entityType, id, 100)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range evs {
		types = append(types, e.Type)
	}
	return types
}

func TestListOrganizations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	acme, globex, web, _, _ := tenants(t, db)
	bind := func(role store.Role, scope store.Scope) *store.Principal {
		return &store.Principal{Subject: "s", Kind: store.ActorHuman,
			Bindings: []store.RoleBinding{{Subject: "s", Role: role, Scope: scope}}}
	}
	tests := []struct {
		name string
		p    *store.Principal
		want []string
	}{
		{"platform-admin sees all", bind(store.RolePlatformAdmin, store.Scope{Kind: store.ScopePlatform}), []string{"acme", "globex"}},
		{"organization-admin", bind(store.RoleOrganizationAdmin, store.Scope{Kind: store.ScopeOrganization, OrganizationID: globex.ID}), []string{"globex"}},
		{"project viewer sees its organization", bind(store.RoleViewer, store.Scope{Kind: store.ScopeProject, OrganizationID: acme.ID, ProjectID: web.ID}), []string{"acme"}},
		{"no bindings", &store.Principal{Subject: "s"}, nil},
		{"nil principal", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			orgs, err := db.ListOrganizations(ctx, tt.p)
			if err != nil {
				t.Fatal(err)
			}
			var keys []string
			for _, o := range orgs {
				keys = append(keys, o.Key)
			}
			if !slices.Equal(keys, tt.want) {
				t.Fatalf("keys %v, want %v", keys, tt.want)
			}
		})
	}
}

func TestUpdateOrganization(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	acme, _, _, _, _ := tenants(t, db)
	o, err := db.UpdateOrganization(ctx, acme.ID, "Acme Corp", store.HumanActor("alice"))
	if err != nil {
		t.Fatal(err)
	}
	if o.Name != "Acme Corp" || o.Key != "acme" || !o.UpdatedAt.After(acme.UpdatedAt) {
		t.Fatalf("updated %+v", o)
	}
	if got := eventTypes(t, db, "organization", acme.ID); !slices.Equal(got, []string{"organization.created", "organization.updated"}) {
		t.Fatalf("events %v", got)
	}
	for _, tc := range []struct {
		name, id, newName string
		code              store.Code
	}{
		{"empty name", acme.ID, "", store.CodeInvalid},
		{"unknown", "00000000-0000-0000-0000-000000000000", "X", store.CodeNotFound},
		{"not a uuid", "nope", "X", store.CodeNotFound},
	} {
		if _, err := db.UpdateOrganization(ctx, tc.id, tc.newName, store.HumanActor("alice")); !store.IsCode(err, tc.code) {
			t.Errorf("%s: error %v, want %s", tc.name, err, tc.code)
		}
	}
}

func TestProjectsListAndUpdate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	acme, _, web, _, _ := tenants(t, db)
	ps, err := db.ListProjects(ctx, acme.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 || ps[0].Key != "API" || ps[1].Key != "WEB" {
		t.Fatalf("projects %+v", ps)
	}
	desc := "The web site"
	p, err := db.UpdateProject(ctx, web.ID, store.ProjectUpdate{Description: &desc}, store.HumanActor("alice"))
	if err != nil {
		t.Fatal(err)
	}
	if p.Description != desc || p.Name != "Web" {
		t.Fatalf("updated %+v", p)
	}
	if got := eventTypes(t, db, "project", web.ID); !slices.Equal(got, []string{"project.created", "project.updated"}) {
		t.Fatalf("events %v", got)
	}
	long := string(make([]byte, 201))
	for _, tc := range []struct {
		name string
		u    store.ProjectUpdate
		code store.Code
	}{
		{"nothing", store.ProjectUpdate{}, store.CodeInvalid},
		{"name too long", store.ProjectUpdate{Name: &long}, store.CodeInvalid},
	} {
		if _, err := db.UpdateProject(ctx, web.ID, tc.u, store.HumanActor("alice")); !store.IsCode(err, tc.code) {
			t.Errorf("%s: error %v, want %s", tc.name, err, tc.code)
		}
	}
	if _, err := db.UpdateProject(ctx, "00000000-0000-0000-0000-000000000000", store.ProjectUpdate{Description: &desc},
		store.HumanActor("alice")); !store.IsCode(err, store.CodeNotFound) {
		t.Errorf("unknown project: error %v", err)
	}
}
