package api

import (
	"fmt"

	"github.com/gofiber/fiber/v2"

	"github.com/balletplanner/ballet/store"
)

// registerTenancy registers organizations, projects and role bindings (SPEC §2).
func (s *Server) registerTenancy(r fiber.Router) {
	r.Get("/organizations", s.listOrganizations)
	r.Post("/organizations", s.createOrganization)
	r.Get("/organizations/:org", s.getOrganization)
	r.Patch("/organizations/:org", s.updateOrganization)
	r.Get("/organizations/:org/projects", s.listProjects)
	r.Post("/organizations/:org/projects", s.createProject)
	r.Get("/organizations/:org/role-bindings", s.listOrganizationRoleBindings)
	r.Post("/organizations/:org/role-bindings", s.createOrganizationRoleBinding)
	r.Get("/projects/:project", s.getProject)
	r.Patch("/projects/:project", s.updateProject)
	r.Get("/projects/:project/role-bindings", s.listProjectRoleBindings)
	r.Post("/projects/:project/role-bindings", s.createProjectRoleBinding)
	r.Delete("/role-bindings/:id", s.deleteRoleBinding)
}

// pathOrganization loads the {org} of the path. An organization the caller
// cannot see answers exactly as one that does not exist.
func (s *Server) pathOrganization(c *fiber.Ctx) (store.Organization, error) {
	key := c.Params("org")
	o, err := s.db.OrganizationByKey(c.UserContext(), key)
	if err == nil && !principal(c).SeesOrganization(o.ID) {
		err = store.Errorf(store.CodeNotFound, "not found")
	}
	if store.IsCode(err, store.CodeNotFound) {
		return store.Organization{}, store.Errorf(store.CodeNotFound, "organization %q not found", key)
	}
	return o, err
}

// pathProject loads the {project} of the path and checks perm on it; a project
// of an organization the caller cannot see answers as one that does not exist.
func (s *Server) pathProject(c *fiber.Ctx, perm store.Permission) (store.Project, error) {
	key := c.Params("project")
	p, err := s.db.ProjectByKey(c.UserContext(), key)
	if err == nil {
		err = principal(c).Authorize(perm, p.OrganizationID, p.ID)
	}
	if store.IsCode(err, store.CodeNotFound) {
		return store.Project{}, store.Errorf(store.CodeNotFound, "project %q not found", key)
	}
	return p, err
}

// tenancyActor is the caller as the actor of the events its writes record.
func tenancyActor(c *fiber.Ctx) store.Actor { return store.HumanActor(principal(c).Subject) }

func (s *Server) listOrganizations(c *fiber.Ctx) error {
	orgs, err := s.db.ListOrganizations(c.UserContext(), principal(c))
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"items": orgs})
}

type createOrganizationRequest struct {
	Key  string `json:"key"`
	Name string `json:"name"`
}

func (s *Server) createOrganization(c *fiber.Ctx) error {
	p := principal(c)
	if !p.Can(store.PermOrganizationCreate, "", "") {
		return &store.Error{Code: store.CodeForbidden,
			Message: fmt.Sprintf("%s may not create organizations (needs %s)", p.Subject, store.PermOrganizationCreate),
			Details: map[string]any{"permission": string(store.PermOrganizationCreate)}}
	}
	var req createOrganizationRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	o, err := s.db.CreateOrganization(c.UserContext(), req.Key, req.Name, tenancyActor(c))
	if err != nil {
		return err
	}
	return c.Status(fiber.StatusCreated).JSON(o)
}

func (s *Server) getOrganization(c *fiber.Ctx) error {
	o, err := s.pathOrganization(c)
	if err != nil {
		return err
	}
	if err := principal(c).AuthorizeInOrganization(store.PermOrganizationRead, o.ID); err != nil {
		return err
	}
	return c.JSON(o)
}

type updateOrganizationRequest struct {
	Name *string `json:"name"`
}

func (s *Server) updateOrganization(c *fiber.Ctx) error {
	o, err := s.pathOrganization(c)
	if err != nil {
		return err
	}
	if err := principal(c).Authorize(store.PermOrganizationUpdate, o.ID, ""); err != nil {
		return err
	}
	var req updateOrganizationRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	if req.Name == nil {
		return store.Errorf(store.CodeInvalid, "nothing to update: give name")
	}
	o, err = s.db.UpdateOrganization(c.UserContext(), o.ID, *req.Name, tenancyActor(c))
	if err != nil {
		return err
	}
	return c.JSON(o)
}

// listProjects lists the organization's projects the caller may read.
func (s *Server) listProjects(c *fiber.Ctx) error {
	o, err := s.pathOrganization(c)
	if err != nil {
		return err
	}
	p := principal(c)
	if err := p.AuthorizeInOrganization(store.PermProjectRead, o.ID); err != nil {
		return err
	}
	all, err := s.db.ListProjects(c.UserContext(), o.ID)
	if err != nil {
		return err
	}
	items := make([]store.Project, 0, len(all))
	for _, pr := range all {
		if p.Can(store.PermProjectRead, o.ID, pr.ID) {
			items = append(items, pr)
		}
	}
	return c.JSON(fiber.Map{"items": items})
}

type createProjectRequest struct {
	Key  string `json:"key"`
	Name string `json:"name"`
}

func (s *Server) createProject(c *fiber.Ctx) error {
	o, err := s.pathOrganization(c)
	if err != nil {
		return err
	}
	if err := principal(c).Authorize(store.PermProjectCreate, o.ID, ""); err != nil {
		return err
	}
	var req createProjectRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	pr, err := s.db.CreateProject(c.UserContext(), o.ID, req.Key, req.Name, tenancyActor(c))
	if err != nil {
		return err
	}
	return c.Status(fiber.StatusCreated).JSON(pr)
}

func (s *Server) getProject(c *fiber.Ctx) error {
	pr, err := s.pathProject(c, store.PermProjectRead)
	if err != nil {
		return err
	}
	return c.JSON(pr)
}

func (s *Server) updateProject(c *fiber.Ctx) error {
	pr, err := s.pathProject(c, store.PermProjectUpdate)
	if err != nil {
		return err
	}
	var req store.ProjectUpdate
	if err := decode(c, &req); err != nil {
		return err
	}
	pr, err = s.db.UpdateProject(c.UserContext(), pr.ID, req, tenancyActor(c))
	if err != nil {
		return err
	}
	return c.JSON(pr)
}

func (s *Server) listOrganizationRoleBindings(c *fiber.Ctx) error {
	o, err := s.pathOrganization(c)
	if err != nil {
		return err
	}
	if err := principal(c).Authorize(store.PermRoleBindingRead, o.ID, ""); err != nil {
		return err
	}
	return s.listRoleBindings(c, store.Scope{Kind: store.ScopeOrganization, OrganizationID: o.ID})
}

func (s *Server) listProjectRoleBindings(c *fiber.Ctx) error {
	pr, err := s.pathProject(c, store.PermRoleBindingRead)
	if err != nil {
		return err
	}
	return s.listRoleBindings(c, store.Scope{Kind: store.ScopeProject, OrganizationID: pr.OrganizationID, ProjectID: pr.ID})
}

func (s *Server) listRoleBindings(c *fiber.Ctx, scope store.Scope) error {
	bs, err := s.db.ListRoleBindings(c.UserContext(), scope)
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"items": bs})
}

// createRoleBindingRequest binds role to subject; Project, accepted only
// under an organization, narrows the scope to that project.
type createRoleBindingRequest struct {
	Subject string     `json:"subject"`
	Role    store.Role `json:"role"`
	Project *string    `json:"project,omitempty"`
}

type projectRoleBindingRequest struct {
	Subject string     `json:"subject"`
	Role    store.Role `json:"role"`
}

func (s *Server) createOrganizationRoleBinding(c *fiber.Ctx) error {
	o, err := s.pathOrganization(c)
	if err != nil {
		return err
	}
	// Refuse early whoever may manage bindings nowhere in the organization;
	// createRoleBinding checks the exact scope.
	if err := principal(c).AuthorizeInOrganization(store.PermRoleBindingManage, o.ID); err != nil {
		return err
	}
	var req createRoleBindingRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	scope := store.Scope{Kind: store.ScopeOrganization, OrganizationID: o.ID}
	if req.Project != nil {
		pr, err := s.db.ProjectByKey(c.UserContext(), *req.Project)
		if store.IsCode(err, store.CodeNotFound) || (err == nil && pr.OrganizationID != o.ID) {
			return store.Errorf(store.CodeInvalid, "project: %q is not a project of organization %q", *req.Project, o.Key)
		}
		if err != nil {
			return err
		}
		scope = store.Scope{Kind: store.ScopeProject, OrganizationID: o.ID, ProjectID: pr.ID}
	}
	return s.createRoleBinding(c, req.Subject, req.Role, scope)
}

func (s *Server) createProjectRoleBinding(c *fiber.Ctx) error {
	pr, err := s.pathProject(c, store.PermRoleBindingManage)
	if err != nil {
		return err
	}
	var req projectRoleBindingRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	return s.createRoleBinding(c, req.Subject, req.Role,
		store.Scope{Kind: store.ScopeProject, OrganizationID: pr.OrganizationID, ProjectID: pr.ID})
}

// createRoleBinding checks role_binding.manage at the scope and validates
// the binding before anything, the subject row included, is written.
func (s *Server) createRoleBinding(c *fiber.Ctx, subject string, role store.Role, scope store.Scope) error {
	if err := principal(c).Authorize(store.PermRoleBindingManage, scope.OrganizationID, scope.ProjectID); err != nil {
		return err
	}
	if subject == "" || len(subject) > 255 {
		return store.Errorf(store.CodeInvalid, "subject: must be 1-255 characters")
	}
	if err := store.ValidateRoleBinding(role, scope); err != nil {
		return err
	}
	b, err := s.db.CreateRoleBinding(c.UserContext(), subject, role, scope, tenancyActor(c))
	if err != nil {
		return err
	}
	return c.Status(fiber.StatusCreated).JSON(b)
}

func (s *Server) deleteRoleBinding(c *fiber.Ctx) error {
	id := c.Params("id")
	b, err := s.db.RoleBindingByID(c.UserContext(), id)
	if err == nil {
		err = principal(c).Authorize(store.PermRoleBindingManage, b.Scope.OrganizationID, b.Scope.ProjectID)
	}
	if store.IsCode(err, store.CodeNotFound) {
		return store.Errorf(store.CodeNotFound, "role binding %q not found", id)
	}
	if err != nil {
		return err
	}
	if _, err := s.db.DeleteRoleBinding(c.UserContext(), b.ID, tenancyActor(c)); err != nil {
		return err
	}
	return c.SendStatus(fiber.StatusNoContent)
}
