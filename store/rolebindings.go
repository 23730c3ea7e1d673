package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// ValidateRoleBinding reports, before anything is written, why role cannot
// be bound at scope: an unknown role, an incomplete scope, platform-admin
// away from the platform, or organization-admin at project scope.
func ValidateRoleBinding(role Role, scope Scope) error {
	if !role.Valid() {
		names := make([]string, len(Roles))
		for i, r := range Roles {
			names[i] = string(r)
		}
		return Errorf(CodeInvalid, "role: unknown role %q; must be one of %s", role, strings.Join(names, ", "))
	}
	switch scope.Kind {
	case ScopePlatform:
		if scope.OrganizationID != "" || scope.ProjectID != "" {
			return Errorf(CodeInvalid, "scope: a platform binding names no organization or project")
		}
	case ScopeOrganization:
		if scope.OrganizationID == "" || scope.ProjectID != "" {
			return Errorf(CodeInvalid, "scope: an organization binding names its organization and no project")
		}
	case ScopeProject:
		if scope.OrganizationID == "" || scope.ProjectID == "" {
			return Errorf(CodeInvalid, "scope: a project binding names its organization and project")
		}
	default:
		return Errorf(CodeInvalid, "scope: kind must be %s, %s or %s, got %q",
			ScopePlatform, ScopeOrganization, ScopeProject, scope.Kind)
	}
	switch {
	case role == RolePlatformAdmin && scope.Kind != ScopePlatform:
		return Errorf(CodeInvalid, "role: %s can only be bound at platform scope", role)
	case role == RoleOrganizationAdmin && scope.Kind == ScopeProject:
		return Errorf(CodeInvalid, "role: %s cannot be bound at project scope; bind it to the organization", role)
	}
	return nil
}

// ListRoleBindings lists bindings oldest first. An organization scope lists
// every binding within the organization, its projects' included; a project
// scope lists that project's own; the platform scope lists platform bindings.
func (db *DB) ListRoleBindings(ctx context.Context, scope Scope) ([]RoleBinding, error) {
	var (
		where string
		args  []any
	)
	switch scope.Kind {
	case ScopePlatform:
		where = `scope_kind = 'platform'`
	case ScopeOrganization:
		where, args = `organization_id::text = $1`, []any{scope.OrganizationID}
	case ScopeProject:
		where, args = `project_id::text = $1`, []any{scope.ProjectID}
	default:
		return nil, fmt.Errorf("store: list role bindings: %w", Errorf(CodeInvalid, "scope: unknown kind %q", scope.Kind))
	}
	rows, err := db.pool.Query(ctx, `SELECT `+roleBindingColumns+` FROM role_bindings
		WHERE `+where+` ORDER BY created_at, id`, args...)
	if err != nil {
		return nil, fmt.Errorf("store: list role bindings: %w", err)
	}
	bs, err := collect(rows, scanRoleBinding)
	if err != nil {
		return nil, fmt.Errorf("store: list role bindings: %w", err)
	}
	return bs, nil
}

// RoleBindingByID finds one binding; an unknown id is not_found.
func (db *DB) RoleBindingByID(ctx context.Context, id string) (RoleBinding, error) {
	rows, err := db.pool.Query(ctx, `SELECT `+roleBindingColumns+` FROM role_bindings WHERE id::text = $1`, id)
	if err != nil {
		return RoleBinding{}, fmt.Errorf("store: role binding: %w", err)
	}
	b, err := collectOne(rows, scanRoleBinding)
	if err != nil {
		return RoleBinding{}, fmt.Errorf("store: role binding: %w", notFound(err, "role binding %q", id))
	}
	return b, nil
}

// DeleteRoleBinding removes a binding and records role_binding.deleted in
// the same transaction (platform bindings, which belong to no organization,
// leave no event, as when they are created). It returns what was deleted.
func (db *DB) DeleteRoleBinding(ctx context.Context, id string, actor Actor) (RoleBinding, error) {
	var b RoleBinding
	err := db.Tx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `DELETE FROM role_bindings WHERE id::text = $1
			RETURNING `+roleBindingColumns, id)
		if err != nil {
			return err
		}
		b, err = collectOne(rows, scanRoleBinding)
		if err != nil {
			return notFound(err, "role binding %q", id)
		}
		if b.Scope.OrganizationID == "" {
			return nil
		}
		_, err = AppendEvent(ctx, tx, Event{OrganizationID: b.Scope.OrganizationID, ProjectID: b.Scope.ProjectID,
			Type: "role_binding.deleted", EntityType: "role_binding", EntityID: b.ID, Actor: actor,
			Payload: MustJSON(b)})
		return err
	})
	if err != nil {
		return RoleBinding{}, fmt.Errorf("store: delete role binding: %w", err)
	}
	return b, nil
}
