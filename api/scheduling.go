package api

import (
	"github.com/gofiber/fiber/v2"

	"github.com/balletplanner/ballet/store"
)

// registerScheduling registers fair scheduling's weights and caps (ours):
// an organization's (a platform admin's to set), a project's (an
// organization admin's), and the planner's backlog (platform admins).
func (s *Server) registerScheduling(r fiber.Router) {
	r.Get("/organizations/:org/scheduling", s.getOrganizationScheduling)
	r.Put("/organizations/:org/scheduling", s.putOrganizationScheduling)
	r.Get("/projects/:project/scheduling", s.getProjectScheduling)
	r.Put("/projects/:project/scheduling", s.putProjectScheduling)
	r.Get("/planner/backlog", s.getPlannerBacklog)
}

// organizationScheduling is an organization's settings as answered:
// max_queued_turns is always there, null when it is the default.
type organizationScheduling struct {
	store.SchedulingSettings
	MaxQueuedTurns *int `json:"max_queued_turns"`
}

func orgScheduling(v store.SchedulingSettings) organizationScheduling {
	return organizationScheduling{SchedulingSettings: v, MaxQueuedTurns: v.MaxQueuedTurns}
}

func (s *Server) getOrganizationScheduling(c *fiber.Ctx) error {
	v, err := s.db.OrganizationScheduling(c.UserContext(), caller(c), c.Params("org"))
	if err != nil {
		return err
	}
	return c.JSON(orgScheduling(v))
}

// putOrganizationScheduling replaces the settings: the body is the whole
// SchedulingSettings object (weight required; an absent or null cap is the
// default).
func (s *Server) putOrganizationScheduling(c *fiber.Ctx) error {
	var req store.SchedulingSettings
	if err := decode(c, &req); err != nil {
		return err
	}
	v, err := s.db.SetOrganizationScheduling(c.UserContext(), caller(c), c.Params("org"), req)
	if err != nil {
		return err
	}
	return c.JSON(orgScheduling(v))
}

func (s *Server) getProjectScheduling(c *fiber.Ctx) error {
	v, err := s.db.ProjectScheduling(c.UserContext(), caller(c), c.Params("project"))
	if err != nil {
		return err
	}
	return c.JSON(v)
}

func (s *Server) putProjectScheduling(c *fiber.Ctx) error {
	var req store.SchedulingSettings
	if err := decode(c, &req); err != nil {
		return err
	}
	v, err := s.db.SetProjectScheduling(c.UserContext(), caller(c), c.Params("project"), req)
	if err != nil {
		return err
	}
	return c.JSON(v)
}

func (s *Server) getPlannerBacklog(c *fiber.Ctx) error {
	b, err := s.db.PlannerBacklog(c.UserContext(), caller(c))
	if err != nil {
		return err
	}
	return c.JSON(b)
}
