package api

import (
	"github.com/gofiber/fiber/v2"

	"github.com/balletplanner/ballet/store"
)

// registerChangesets registers the changeset routes of SPEC §10.
func (s *Server) registerChangesets(r fiber.Router) {
	r.Get("/projects/:project/changesets", s.listChangesets)
	r.Post("/projects/:project/changesets", s.proposeChangeset)
	r.Get("/changesets/:id", s.getChangeset)
	r.Post("/changesets/:id/apply", s.applyChangeset)
	r.Post("/changesets/:id/reject", s.rejectChangeset)
}

func (s *Server) listChangesets(c *fiber.Ctx) error {
	out, err := s.db.ListChangesets(c.UserContext(), trackerCaller(c), c.Params("project"), c.Query("status"))
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"items": out})
}

func (s *Server) proposeChangeset(c *fiber.Ctx) error {
	var p store.Proposal
	if err := decode(c, &p); err != nil {
		return err
	}
	cs, err := s.db.ProposeChangeset(c.UserContext(), trackerCaller(c), c.Params("project"), p)
	if err != nil {
		return err
	}
	return c.Status(fiber.StatusCreated).JSON(cs)
}

func (s *Server) getChangeset(c *fiber.Ctx) error {
	cs, err := s.db.GetChangeset(c.UserContext(), trackerCaller(c), c.Params("id"))
	if err != nil {
		return err
	}
	return c.JSON(cs)
}

// applyRequest chooses the operations to apply by 0-based index.
type applyRequest struct {
	Operations []int `json:"operations"`
}

func (s *Server) applyChangeset(c *fiber.Ctx) error {
	var req applyRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	if req.Operations == nil {
		return store.Errorf(store.CodeInvalid, "operations: required (the 0-based indexes to apply)")
	}
	cs, err := s.db.ApplyChangeset(c.UserContext(), trackerCaller(c), c.Params("id"), req.Operations)
	if err != nil {
		return err
	}
	return c.JSON(cs)
}

// rejectRequest is the optional body of a rejection.
type rejectRequest struct {
	Reason string `json:"reason"`
}

func (s *Server) rejectChangeset(c *fiber.Ctx) error {
	var req rejectRequest
	if err := decodeOptional(c, &req); err != nil {
		return err
	}
	cs, err := s.db.RejectChangeset(c.UserContext(), trackerCaller(c), c.Params("id"), req.Reason)
	if err != nil {
		return err
	}
	return c.JSON(cs)
}
