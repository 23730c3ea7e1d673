package store

import (
	"context"
	"fmt"
)

// The authorization rules of skills and knowledge, all built on
// Principal.Authorize, the one permission check.

// authorizePlatformSkill checks perm at platform scope. Platform skills are
// visible to everyone, so a refusal is forbidden, never not found. Reading
// needs skill.read somewhere; writing needs it at platform scope.
func authorizePlatformSkill(caller Caller, perm Permission) error {
	if perm == PermSkillRead && caller.Principal.canAnywhere(perm) {
		return nil
	}
	if err := caller.Authorize(perm, "", ""); IsCode(err, CodeNotFound) {
		return &Error{Code: CodeForbidden, Message: fmt.Sprintf("%s needs %s at platform scope", subjectOf(caller), perm),
			Details: map[string]any{"permission": string(perm)}}
	} else if err != nil {
		return err
	}
	return nil
}

// canAnywhere reports whether one of p's bindings grants perm at its own scope.
func (p *Principal) canAnywhere(perm Permission) bool {
	if p == nil {
		return false
	}
	for _, b := range p.Bindings {
		if p.Can(perm, b.Scope.OrganizationID, b.Scope.ProjectID) {
			return true
		}
	}
	return false
}

// canInOrganization reports whether p holds perm on the organization or on
// one of its projects.
func (p *Principal) canInOrganization(perm Permission, organizationID string) bool {
	if p.Can(perm, organizationID, "") {
		return true
	}
	for _, b := range p.Bindings {
		if b.Scope.Kind == ScopeProject && b.Scope.OrganizationID == organizationID && p.Can(perm, organizationID, b.Scope.ProjectID) {
			return true
		}
	}
	return false
}

// authorizeSkill checks perm on an existing skill. A skill is readable
// wherever it applies: platform skills by anyone holding skill.read,
// organization skills by holders on the organization or any of its projects.
func authorizeSkill(caller Caller, perm Permission, s Skill) error {
	switch {
	case s.ScopeKind == ScopePlatform:
		return authorizePlatformSkill(caller, perm)
	case s.ScopeKind == ScopeOrganization && perm == PermSkillRead && caller.Principal.canInOrganization(perm, s.OrganizationID):
		return nil
	}
	return caller.Authorize(perm, s.OrganizationID, s.ProjectID)
}

// subjectOf names the caller in refusals.
func subjectOf(caller Caller) string {
	if caller.Principal != nil && caller.Principal.Subject != "" {
		return caller.Principal.Subject
	}
	return "you"
}

// humanOf is the human a write is recorded for: the human the planner acts
// for, else the actor itself.
func humanOf(caller Caller) string {
	if caller.Actor.ActingFor != "" {
		return caller.Actor.ActingFor
	}
	return caller.Actor.Subject
}

// kbOrganization loads an organization by key (or id) and authorizes perm on
// it; one the caller cannot see answers like a missing one.
func (db *DB) kbOrganization(ctx context.Context, caller Caller, perm Permission, key string) (Organization, error) {
	o, err := db.OrganizationByKey(ctx, key)
	if err == nil {
		err = caller.Authorize(perm, o.ID, "")
	}
	if IsCode(err, CodeNotFound) {
		return Organization{}, Errorf(CodeNotFound, "organization %q not found", key)
	}
	return o, err
}

// kbProject loads a project by key (or id) and authorizes perm on it; one
// the caller cannot see answers like a missing one.
func (db *DB) kbProject(ctx context.Context, caller Caller, perm Permission, key string) (Project, error) {
	p, err := db.ProjectByKey(ctx, key)
	if err == nil {
		err = caller.Authorize(perm, p.OrganizationID, p.ID)
	}
	if IsCode(err, CodeNotFound) {
		return Project{}, Errorf(CodeNotFound, "project %q not found", key)
	}
	return p, err
}

// visibleOrganizations lists the organizations p has any binding in.
func visibleOrganizations(p *Principal) []string {
	var ids []string
	if p == nil {
		return ids
	}
	for _, b := range p.Bindings {
		if b.Scope.OrganizationID != "" {
			ids = append(ids, b.Scope.OrganizationID)
		}
	}
	return ids
}

// authorizeKnowledge is the knowledge rule, built on Authorize: the space is
// the organization's, so holding perm on the organization suffices. Without
// it, reading needs perm on some project of the organization, and writing
// needs perm on every project the entry is (or will be) linked to, at least
// one. An organization the caller cannot see is not found.
func authorizeKnowledge(caller Caller, perm Permission, orgID string, projectIDs []string) error {
	err := caller.Authorize(perm, orgID, "")
	if err == nil || !IsCode(err, CodeForbidden) {
		return err
	}
	if perm == PermKnowledgeRead {
		if caller.Principal.canInOrganization(perm, orgID) {
			return nil
		}
		return err
	}
	if len(projectIDs) == 0 {
		return &Error{Code: CodeForbidden, Details: map[string]any{"permission": string(perm)}, Message: fmt.Sprintf(
			"%s may not write knowledge of the whole organization (needs %s); link the entry to projects you may write",
			subjectOf(caller), perm)}
	}
	for _, pid := range projectIDs {
		if err := caller.Authorize(perm, orgID, pid); err != nil {
			return err
		}
	}
	return nil
}

// knowledgeWriteGate refuses, before any validation, a caller who may
// write knowledge nowhere in the organization.
func knowledgeWriteGate(caller Caller, orgID string) error {
	if caller.Principal.canInOrganization(PermKnowledgeWrite, orgID) {
		return nil
	}
	return caller.Authorize(PermKnowledgeWrite, orgID, "")
}

// knowledgeOrg resolves the organization of a knowledge request and checks
// that the caller may read its space; an invisible one is not found.
func (db *DB) knowledgeOrg(ctx context.Context, caller Caller, orgKey string) (Organization, error) {
	org, err := db.OrganizationByKey(ctx, orgKey)
	if err == nil {
		err = authorizeKnowledge(caller, PermKnowledgeRead, org.ID, nil)
	}
	if IsCode(err, CodeNotFound) {
		return Organization{}, Errorf(CodeNotFound, "organization %q not found", orgKey)
	}
	return org, err
}
