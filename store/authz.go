package store

import (
	"fmt"
	"slices"
)

// Permission names one capability of SPEC §2.
type Permission string

// Permissions of SPEC §2.
const (
	PermOrganizationCreate Permission = "organization.create"
	PermOrganizationRead   Permission = "organization.read"
	PermOrganizationUpdate Permission = "organization.update"
	PermProjectCreate      Permission = "project.create"
	PermProjectRead        Permission = "project.read"
	PermProjectUpdate      Permission = "project.update"
	PermRoleBindingManage  Permission = "role_binding.manage"
	PermRoleBindingRead    Permission = "role_binding.read"
	PermTrackerRead        Permission = "tracker.read"
	PermTrackerWrite       Permission = "tracker.write"
	PermCredentialManage   Permission = "credential.manage"
	PermKnowledgeRead      Permission = "knowledge.read"
	PermKnowledgeWrite     Permission = "knowledge.write"
	PermSkillRead          Permission = "skill.read"
	PermSkillWrite         Permission = "skill.write"
	PermRunManage          Permission = "run.manage"
)

// AllPermissions lists every permission.
var AllPermissions = []Permission{
	PermOrganizationCreate, PermOrganizationRead, PermOrganizationUpdate,
	PermProjectCreate, PermProjectRead, PermProjectUpdate,
	PermRoleBindingManage, PermRoleBindingRead,
	PermTrackerRead, PermTrackerWrite, PermCredentialManage,
	PermKnowledgeRead, PermKnowledgeWrite, PermSkillRead, PermSkillWrite, PermRunManage,
}

// Role is a named set of permissions bound to a subject at a scope.
type Role string

// Roles of SPEC §2.
const (
	RolePlatformAdmin     Role = "platform-admin"
	RoleOrganizationAdmin Role = "organization-admin"
	RoleEngineer          Role = "engineer"
	RoleApprover          Role = "approver"
	RoleViewer            Role = "viewer"
)

// Roles lists every role.
var Roles = []Role{RolePlatformAdmin, RoleOrganizationAdmin, RoleEngineer, RoleApprover, RoleViewer}

var readPermissions = []Permission{PermOrganizationRead, PermProjectRead, PermTrackerRead, PermKnowledgeRead, PermSkillRead}

// Permissions returns what the role grants.
func (r Role) Permissions() []Permission {
	switch r {
	case RolePlatformAdmin:
		return AllPermissions
	case RoleOrganizationAdmin:
		return slices.DeleteFunc(slices.Clone(AllPermissions), func(p Permission) bool { return p == PermOrganizationCreate })
	case RoleEngineer:
		return append(slices.Clone(readPermissions), PermRoleBindingRead, PermTrackerWrite, PermKnowledgeWrite)
	case RoleApprover, RoleViewer:
		return readPermissions
	}
	return nil
}

// Valid reports whether r is a known role.
func (r Role) Valid() bool { return slices.Contains(Roles, r) }

// Scope says where a role binding applies.
type Scope struct {
	Kind           string `json:"kind"` // platform | organization | project
	OrganizationID string `json:"organization_id,omitempty"`
	ProjectID      string `json:"project_id,omitempty"`
}

// Scope kinds.
const (
	ScopePlatform     = "platform"
	ScopeOrganization = "organization"
	ScopeProject      = "project"
)

// Principal is an authenticated subject with its role bindings: the one
// place that decides every permission check, for REST and the planner alike.
type Principal struct {
	Subject  string
	Kind     string // human | service | system
	Bindings []RoleBinding
}

// Can reports whether the principal holds perm on the organization and,
// when projectID is not empty, on that project of it.
func (p *Principal) Can(perm Permission, organizationID, projectID string) bool {
	if p == nil {
		return false
	}
	for _, b := range p.Bindings {
		if !b.covers(organizationID, projectID) {
			continue
		}
		if slices.Contains(b.Role.Permissions(), perm) {
			return true
		}
	}
	return false
}

// SeesOrganization reports whether any binding reaches the organization:
// anything of an organization the principal cannot see answers 404.
func (p *Principal) SeesOrganization(organizationID string) bool {
	if p == nil {
		return false
	}
	for _, b := range p.Bindings {
		switch b.Scope.Kind {
		case ScopePlatform:
			return true
		case ScopeOrganization, ScopeProject:
			if b.Scope.OrganizationID == organizationID {
				return true
			}
		}
	}
	return false
}

// IsPlatformAdmin reports whether the principal is bound platform-admin.
func (p *Principal) IsPlatformAdmin() bool {
	if p == nil {
		return false
	}
	for _, b := range p.Bindings {
		if b.Role == RolePlatformAdmin && b.Scope.Kind == ScopePlatform {
			return true
		}
	}
	return false
}

func (b RoleBinding) covers(organizationID, projectID string) bool {
	switch b.Scope.Kind {
	case ScopePlatform:
		return true
	case ScopeOrganization:
		return b.Scope.OrganizationID == organizationID
	case ScopeProject:
		return projectID != "" && b.Scope.ProjectID == projectID
	}
	return false
}

// Authorize is the one permission check of REST and the planner's tools:
// nil when p holds perm; not_found when p cannot see the organization at all
// (its things must look absent); forbidden otherwise.
func (p *Principal) Authorize(perm Permission, organizationID, projectID string) error {
	if p.Can(perm, organizationID, projectID) {
		return nil
	}
	if !p.SeesOrganization(organizationID) {
		return Errorf(CodeNotFound, "not found")
	}
	who := "you"
	if p != nil && p.Subject != "" {
		who = p.Subject
	}
	return &Error{Code: CodeForbidden, Message: fmt.Sprintf("%s may not %s here (needs %s)", who, permVerb[perm], perm),
		Details: map[string]any{"permission": string(perm)}}
}

var permVerb = map[Permission]string{
	PermOrganizationCreate: "create organizations", PermOrganizationRead: "read the organization",
	PermOrganizationUpdate: "update the organization", PermProjectCreate: "create projects",
	PermProjectRead: "read the project", PermProjectUpdate: "update the project",
	PermRoleBindingManage: "manage role bindings", PermRoleBindingRead: "read role bindings",
	PermTrackerRead: "read the tracker", PermTrackerWrite: "change the tracker",
	PermCredentialManage: "manage credentials", PermKnowledgeRead: "read knowledge",
	PermKnowledgeWrite: "write knowledge", PermSkillRead: "read skills", PermSkillWrite: "write skills",
	PermRunManage: "manage runs",
}

// Caller is who a domain function acts for: the principal whose permissions
// are checked, and the actor its events record. REST passes the human as
// both; the planner passes the human's principal with PlannerActor.
type Caller struct {
	Principal *Principal
	Actor     Actor
}

// HumanCaller is a human acting for themselves.
func HumanCaller(p *Principal) Caller {
	return Caller{Principal: p, Actor: HumanActor(p.Subject)}
}

// Authorize checks perm for the caller's principal; see Principal.Authorize.
func (c Caller) Authorize(perm Permission, organizationID, projectID string) error {
	return c.Principal.Authorize(perm, organizationID, projectID)
}
