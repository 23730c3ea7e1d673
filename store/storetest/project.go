package storetest

import (
	"context"
	"testing"

	"github.com/balletplanner/ballet/store"
)

// Project is organization acme with its project WEB and an engineer of
// that project, ann@example.com, on a database of the test's own.
type Project struct {
	DB           *store.DB
	Organization store.Organization
	Project      store.Project
	Human        store.Caller
}

// NewProject makes a database of the test's own (New) holding organization
// acme, project WEB and its engineer; it fails t on any error.
func NewProject(t testing.TB) Project {
	t.Helper()
	ctx := context.Background()
	db := New(t)
	sys := store.SystemActor()
	org, err := db.CreateOrganization(ctx, "acme", "Acme", sys)
	if err != nil {
		t.Fatalf("storetest: create organization: %v", err)
	}
	project, err := db.CreateProject(ctx, org.ID, "WEB", "Web", sys)
	if err != nil {
		t.Fatalf("storetest: create project: %v", err)
	}
	if _, err := db.CreateRoleBinding(ctx, "ann@example.com", store.RoleEngineer,
		store.Scope{Kind: store.ScopeProject, OrganizationID: org.ID, ProjectID: project.ID}, sys); err != nil {
		t.Fatalf("storetest: bind engineer: %v", err)
	}
	p, err := db.Principal(ctx, "ann@example.com")
	if err != nil {
		t.Fatalf("storetest: principal: %v", err)
	}
	return Project{DB: db, Organization: org, Project: project, Human: store.HumanCaller(p)}
}
