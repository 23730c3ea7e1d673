package api

import (
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/balletplanner/ballet/store"
)

// registerModelAllowlists registers the models a scope's gateway calls may
// use (ours): an organization's list, which binds its projects, and a
// project's, which narrows it.
func (s *Server) registerModelAllowlists(r fiber.Router) {
	r.Get("/organizations/:org/models", s.getOrganizationModels)
	r.Put("/organizations/:org/models", s.putOrganizationModels)
	r.Delete("/organizations/:org/models", s.deleteOrganizationModels)
	r.Get("/projects/:project/models", s.getProjectModels)
	r.Put("/projects/:project/models", s.putProjectModels)
	r.Delete("/projects/:project/models", s.deleteProjectModels)
}

// modelsRequest is the body of PUT …/models: the allow-list, empty for
// every model.
type modelsRequest struct {
	Models *[]string `json:"models"`
}

// modelsView is the reply of the models routes: the list stored at the
// scope (empty when none is: every model), and for a project its
// organization's list, which binds it too.
type modelsView struct {
	Scope        string     `json:"scope"`
	Organization string     `json:"organization"`
	Project      string     `json:"project,omitempty"`
	Models       []string   `json:"models"`
	UpdatedBy    *string    `json:"updated_by"`
	UpdatedAt    *time.Time `json:"updated_at"`
	// OrganizationModels is, for a project, its organization's list.
	OrganizationModels *[]string `json:"organization_models,omitempty"`
}

func (s *Server) getOrganizationModels(c *fiber.Ctx) error {
	o, err := s.pathOrganization(c)
	if err != nil {
		return err
	}
	if err := principal(c).AuthorizeInOrganization(store.PermOrganizationRead, o.ID); err != nil {
		return err
	}
	return s.replyModels(c, scopeRef{orgID: o.ID, orgKey: o.Key})
}

func (s *Server) getProjectModels(c *fiber.Ctx) error {
	t, err := s.projectTarget(c, store.PermProjectRead)
	if err != nil {
		return err
	}
	return s.replyModels(c, t)
}

func (s *Server) putOrganizationModels(c *fiber.Ctx) error {
	t, err := s.organizationTarget(c, store.PermCredentialManage)
	if err != nil {
		return err
	}
	return s.putModels(c, t)
}

func (s *Server) putProjectModels(c *fiber.Ctx) error {
	t, err := s.projectTarget(c, store.PermCredentialManage)
	if err != nil {
		return err
	}
	return s.putModels(c, t)
}

func (s *Server) deleteOrganizationModels(c *fiber.Ctx) error {
	t, err := s.organizationTarget(c, store.PermCredentialManage)
	if err != nil {
		return err
	}
	return s.deleteModels(c, t)
}

func (s *Server) deleteProjectModels(c *fiber.Ctx) error {
	t, err := s.projectTarget(c, store.PermCredentialManage)
	if err != nil {
		return err
	}
	return s.deleteModels(c, t)
}

func (s *Server) putModels(c *fiber.Ctx, t scopeRef) error {
	var req modelsRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	if req.Models == nil {
		return store.Errorf(store.CodeInvalid, "models: field required (an array of model names, empty for every model)")
	}
	if _, err := s.db.PutModelAllowlist(c.UserContext(), store.ModelAllowlist{OrganizationID: t.orgID, ProjectID: t.projectID,
		Models: *req.Models, UpdatedBy: principal(c).Subject}); err != nil {
		return err
	}
	return s.replyModels(c, t)
}

func (s *Server) deleteModels(c *fiber.Ctx, t scopeRef) error {
	if err := s.db.DeleteModelAllowlist(c.UserContext(), t.orgID, t.projectID); err != nil {
		if store.IsCode(err, store.CodeNotFound) {
			return store.Errorf(store.CodeNotFound, "no model allow-list is stored for %s", t.describe())
		}
		return err
	}
	return c.SendStatus(fiber.StatusNoContent)
}

// replyModels answers the list stored at the target's scope and, for a
// project, its organization's.
func (s *Server) replyModels(c *fiber.Ctx, t scopeRef) error {
	ctx := c.UserContext()
	v := modelsView{Scope: scopeOrganization, Organization: t.orgKey, Models: []string{}}
	if t.projectID != "" {
		v.Scope, v.Project = scopeProject, t.projectKey
	}
	stored, err := s.db.GetModelAllowlist(ctx, t.orgID, t.projectID)
	switch {
	case err == nil:
		v.Models, v.UpdatedBy, v.UpdatedAt = stored.Models, &stored.UpdatedBy, &stored.UpdatedAt
	case !store.IsCode(err, store.CodeNotFound):
		return err
	}
	if t.projectID != "" {
		rule, err := s.db.EffectiveModelRule(ctx, t.orgID, t.projectID)
		if err != nil {
			return err
		}
		org := rule.Organization
		if org == nil {
			org = []string{}
		}
		v.OrganizationModels = &org
	}
	return c.JSON(v)
}
