package store

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
)

// AuthorizeInOrganization is Authorize for reading an organization's own
// records: nil when p holds perm at the organization or at any of its
// projects, so that a member bound to one project can still see the
// organization it belongs to. Otherwise it answers as Authorize does.
func (p *Principal) AuthorizeInOrganization(perm Permission, organizationID string) error {
	err := p.Authorize(perm, organizationID, "")
	if err == nil || p == nil || !IsCode(err, CodeForbidden) {
		return err
	}
	for _, b := range p.Bindings {
		if b.Scope.Kind == ScopeProject && b.Scope.OrganizationID == organizationID &&
			p.Can(perm, organizationID, b.Scope.ProjectID) {
			return nil
		}
	}
	return err
}

// ListOrganizations lists, by key, the organizations whose record p may
// read (see AuthorizeInOrganization): every one for a platform-admin.
func (db *DB) ListOrganizations(ctx context.Context, p *Principal) ([]Organization, error) {
	if p == nil {
		return []Organization{}, nil
	}
	var ids []string
	all := p.IsPlatformAdmin()
	for _, b := range p.Bindings {
		if b.Scope.OrganizationID != "" && !slices.Contains(ids, b.Scope.OrganizationID) {
			ids = append(ids, b.Scope.OrganizationID)
		}
	}
	rows, err := db.pool.Query(ctx, `SELECT `+organizationColumns+` FROM organizations
		WHERE $1 OR id::text = ANY($2) ORDER BY key`, all, ids)
	if err != nil {
		return nil, fmt.Errorf("store: list organizations: %w", err)
	}
	orgs, err := collect(rows, scanOrganization)
	if err != nil {
		return nil, fmt.Errorf("store: list organizations: %w", err)
	}
	return slices.DeleteFunc(orgs, func(o Organization) bool {
		return p.AuthorizeInOrganization(PermOrganizationRead, o.ID) != nil
	}), nil
}

// UpdateOrganization renames an organization and records
// organization.updated in the same transaction.
func (db *DB) UpdateOrganization(ctx context.Context, id, name string, actor Actor) (Organization, error) {
	if name == "" || len(name) > 200 {
		return Organization{}, fmt.Errorf("store: update organization: %w",
			Errorf(CodeInvalid, "name: must be 1-200 characters"))
	}
	var o Organization
	err := db.Tx(ctx, func(tx pgx.Tx) error {
		var previous string
		err := tx.QueryRow(ctx, `SELECT name FROM organizations WHERE id::text = $1 FOR UPDATE`, id).Scan(&previous)
		if err != nil {
			return notFound(err, "organization %q", id)
		}
		o, err = scanOrganization(tx.QueryRow(ctx, `
			UPDATE organizations SET name = $2, updated_at = now() WHERE id::text = $1
			RETURNING `+organizationColumns, id, name))
		if err != nil {
			return err
		}
		_, err = AppendEvent(ctx, tx, Event{OrganizationID: o.ID, Type: "organization.updated",
			EntityType: "organization", EntityID: o.ID, EntityKey: o.Key, Actor: actor,
			Payload: MustJSON(map[string]any{"name": name, "previous": map[string]any{"name": previous}})})
		return err
	})
	if err != nil {
		return Organization{}, fmt.Errorf("store: update organization: %w", err)
	}
	return o, nil
}

// ListProjects lists an organization's projects by key.
func (db *DB) ListProjects(ctx context.Context, organizationID string) ([]Project, error) {
	rows, err := db.pool.Query(ctx, `SELECT `+projectColumns+` FROM projects
		WHERE organization_id::text = $1 ORDER BY key`, organizationID)
	if err != nil {
		return nil, fmt.Errorf("store: list projects: %w", err)
	}
	ps, err := collect(rows, scanProject)
	if err != nil {
		return nil, fmt.Errorf("store: list projects: %w", err)
	}
	return ps, nil
}

// ProjectUpdate holds the fields of a project to change; nil leaves a field as is.
type ProjectUpdate struct {
	Name        *string `json:"name,omitempty"`
	Description *string `json:"description,omitempty"`
}

// UpdateProject changes a project's name or description and records
// project.updated, with the changed fields, in the same transaction.
func (db *DB) UpdateProject(ctx context.Context, id string, u ProjectUpdate, actor Actor) (Project, error) {
	if err := u.validate(); err != nil {
		return Project{}, fmt.Errorf("store: update project: %w", err)
	}
	var p Project
	err := db.Tx(ctx, func(tx pgx.Tx) error {
		var prev Project
		err := tx.QueryRow(ctx, `
			SELECT name, description FROM projects WHERE id::text = $1 FOR UPDATE`, id).
			Scan(&prev.Name, &prev.Description)
		if err != nil {
			return notFound(err, "project %q", id)
		}
		p, err = scanProject(tx.QueryRow(ctx, `
			UPDATE projects SET name = COALESCE($2, name), description = COALESCE($3, description),
			       updated_at = now()
			WHERE id::text = $1
			RETURNING `+projectColumns, id, u.Name, u.Description))
		if err != nil {
			return err
		}
		previous := map[string]any{}
		if u.Name != nil {
			previous["name"] = prev.Name
		}
		if u.Description != nil {
			previous["description"] = prev.Description
		}
		_, err = AppendEvent(ctx, tx, Event{OrganizationID: p.OrganizationID, ProjectID: p.ID,
			Type: "project.updated", EntityType: "project", EntityID: p.ID, EntityKey: p.Key, Actor: actor,
			Payload: MustJSON(map[string]any{"changes": u, "previous": previous})})
		return err
	})
	if err != nil {
		return Project{}, fmt.Errorf("store: update project: %w", err)
	}
	return p, nil
}

func (u ProjectUpdate) validate() error {
	if u.Name == nil && u.Description == nil {
		return Errorf(CodeInvalid, "nothing to update: give name or description")
	}
	if u.Name != nil && (*u.Name == "" || len(*u.Name) > 200) {
		return Errorf(CodeInvalid, "name: must be 1-200 characters")
	}
	if u.Description != nil && len(*u.Description) > 50000 {
		return Errorf(CodeInvalid, "description: at most 50000 characters")
	}
	return nil
}
