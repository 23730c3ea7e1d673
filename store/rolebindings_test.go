package store_test

import (
	"context"
	"slices"
	"testing"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
)

func TestValidateRoleBinding(t *testing.T) {
	t.Parallel()
	platform := store.Scope{Kind: store.ScopePlatform}
	org := store.Scope{Kind: store.ScopeOrganization, OrganizationID: "o"}
	project := store.Scope{Kind: store.ScopeProject, OrganizationID: "o", ProjectID: "p"}
	tests := []struct {
		name  string
		role  store.Role
		scope store.Scope
		ok    bool
	}{
		{"platform-admin at platform", store.RolePlatformAdmin, platform, true},
		{"organization-admin at organization", store.RoleOrganizationAdmin, org, true},
		{"engineer at project", store.RoleEngineer, project, true},
		{"viewer at organization", store.RoleViewer, org, true},
		{"unknown role", "owner", org, false},
		{"platform-admin at organization", store.RolePlatformAdmin, org, false},
		{"organization-admin at project", store.RoleOrganizationAdmin, project, false},
		{"organization scope without organization", store.RoleViewer, store.Scope{Kind: store.ScopeOrganization}, false},
		{"project scope without project", store.RoleViewer, store.Scope{Kind: store.ScopeProject, OrganizationID: "o"}, false},
		{"unknown scope", store.RoleViewer, store.Scope{Kind: "team"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := store.ValidateRoleBinding(tt.role, tt.scope)
			if (err == nil) != tt.ok || (err != nil && !store.IsCode(err, store.CodeInvalid)) {
				t.Fatalf("error %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func TestRoleBindingsListAndDelete(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	acme, globex, web, api, glx := tenants(t, db)
	sys := store.SystemActor()
	bind := func(subject string, role store.Role, scope store.Scope) store.RoleBinding {
		t.Helper()
		b, err := db.CreateRoleBinding(ctx, subject, role, scope, sys)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	orgAdmin := bind("ann", store.RoleOrganizationAdmin, store.Scope{Kind: store.ScopeOrganization, OrganizationID: acme.ID})
	webEng := bind("bob", store.RoleEngineer, store.Scope{Kind: store.ScopeProject, OrganizationID: acme.ID, ProjectID: web.ID})
	apiView := bind("cid", store.RoleViewer, store.Scope{Kind: store.ScopeProject, OrganizationID: acme.ID, ProjectID: api.ID})
	bind("dan", store.RoleViewer, store.Scope{Kind: store.ScopeProject, OrganizationID: globex.ID, ProjectID: glx.ID})
	plat := bind("eve", store.RolePlatformAdmin, store.Scope{Kind: store.ScopePlatform})

	tests := []struct {
		name  string
		scope store.Scope
		want  []string
	}{
		{"organization lists its projects' too", store.Scope{Kind: store.ScopeOrganization, OrganizationID: acme.ID}, []string{orgAdmin.ID, webEng.ID, apiView.ID}},
		{"project lists its own", store.Scope{Kind: store.ScopeProject, OrganizationID: acme.ID, ProjectID: web.ID}, []string{webEng.ID}},
		{"platform", store.Scope{Kind: store.ScopePlatform}, []string{plat.ID}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bs, err := db.ListRoleBindings(ctx, tt.scope)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, b := range bs {
				ids = append(ids, b.ID)
			}
			if !slices.Equal(ids, tt.want) {
				t.Fatalf("ids %v, want %v", ids, tt.want)
			}
		})
	}
	if _, err := db.ListRoleBindings(ctx, store.Scope{Kind: "team"}); !store.IsCode(err, store.CodeInvalid) {
		t.Fatalf("unknown scope: %v", err)
	}

	got, err := db.RoleBindingByID(ctx, webEng.ID)
	if err != nil || got.Subject != "bob" || got.Scope.ProjectID != web.ID {
		t.Fatalf("by id: %+v, %v", got, err)
	}
	deleted, err := db.DeleteRoleBinding(ctx, webEng.ID, store.HumanActor("ann"))
	if err != nil || deleted.ID != webEng.ID {
		t.Fatalf("delete: %+v, %v", deleted, err)
	}
	if types := eventTypes(t, db, "role_binding", webEng.ID); !slices.Equal(types, []string{"role_binding.created", "role_binding.deleted"}) {
		t.Fatalf("events %v", types)
	}
	p, err := db.Principal(ctx, "bob")
	if err != nil || len(p.Bindings) != 0 {
		t.Fatalf("bob keeps %+v, %v", p, err)
	}
	for _, id := range []string{webEng.ID, "not-a-uuid"} {
		if _, err := db.DeleteRoleBinding(ctx, id, sys); !store.IsCode(err, store.CodeNotFound) {
			t.Errorf("delete %q again: %v", id, err)
		}
		if _, err := db.RoleBindingByID(ctx, id); !store.IsCode(err, store.CodeNotFound) {
			t.Errorf("by id %q: %v", id, err)
		}
	}
	if _, err := db.DeleteRoleBinding(ctx, plat.ID, sys); err != nil {
		t.Fatalf("delete platform binding: %v", err)
	}
}

func TestAuthorizeInOrganization(t *testing.T) {
	t.Parallel()
	project := store.Scope{Kind: store.ScopeProject, OrganizationID: "acme", ProjectID: "web"}
	viewer := &store.Principal{Subject: "v", Bindings: []store.RoleBinding{{Role: store.RoleViewer, Scope: project}}}
	tests := []struct {
		name string
		perm store.Permission
		org  string
		code store.Code // "" for allowed
	}{
		{"read through a project binding", store.PermOrganizationRead, "acme", ""},
		{"update needs more", store.PermOrganizationUpdate, "acme", store.CodeForbidden},
		{"other organization", store.PermOrganizationRead, "globex", store.CodeNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := viewer.AuthorizeInOrganization(tt.perm, tt.org)
			if tt.code == "" && err != nil || tt.code != "" && !store.IsCode(err, tt.code) {
				t.Fatalf("error %v, want %q", err, tt.code)
			}
		})
	}
}
