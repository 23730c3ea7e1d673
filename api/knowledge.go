package api

import (
	"github.com/gofiber/fiber/v2"

	"github.com/balletplanner/ballet/store"
)

func (s *Server) registerKnowledge(r fiber.Router) {
	r.Get("/organizations/:org/knowledge/entries", s.listKnowledge)
	r.Post("/organizations/:org/knowledge/entries", s.createKnowledge)
	r.Get("/organizations/:org/knowledge/entries/:id", s.getKnowledge)
	r.Patch("/organizations/:org/knowledge/entries/:id", s.updateKnowledge)
	r.Get("/organizations/:org/knowledge/entries/:id/versions", s.listKnowledgeVersions)
	r.Get("/organizations/:org/knowledge/entries/:id/versions/:n", s.getKnowledgeVersion)
	r.Get("/organizations/:org/knowledge/search", s.searchKnowledge)
}

func (s *Server) listKnowledge(c *fiber.Ctx) error {
	limit, err := kbQueryInt(c, "limit")
	if err != nil {
		return err
	}
	list, err := s.db.ListKnowledge(c.UserContext(), kbCaller(c), c.Params("org"), store.KnowledgeFilter{
		Kind: c.Query("kind"), Project: c.Query("project"), Item: c.Query("item"), Limit: limit})
	if err != nil {
		return err
	}
	return c.JSON(kbItems(list))
}

func (s *Server) createKnowledge(c *fiber.Ctx) error {
	var req store.NewKnowledge
	if err := decode(c, &req); err != nil {
		return err
	}
	k, err := s.db.CreateKnowledge(c.UserContext(), kbCaller(c), c.Params("org"), req)
	if err != nil {
		return err
	}
	return c.Status(fiber.StatusCreated).JSON(k)
}

func (s *Server) getKnowledge(c *fiber.Ctx) error {
	k, err := s.db.GetKnowledge(c.UserContext(), kbCaller(c), c.Params("org"), c.Params("id"))
	if err != nil {
		return err
	}
	return c.JSON(k)
}

func (s *Server) updateKnowledge(c *fiber.Ctx) error {
	var req store.KnowledgeUpdate
	if err := decode(c, &req); err != nil {
		return err
	}
	k, err := s.db.UpdateKnowledge(c.UserContext(), kbCaller(c), c.Params("org"), c.Params("id"), req)
	if err != nil {
		return err
	}
	return c.JSON(k)
}

func (s *Server) listKnowledgeVersions(c *fiber.Ctx) error {
	vs, err := s.db.ListKnowledgeVersions(c.UserContext(), kbCaller(c), c.Params("org"), c.Params("id"))
	if err != nil {
		return err
	}
	return c.JSON(kbItems(vs))
}

func (s *Server) getKnowledgeVersion(c *fiber.Ctx) error {
	n, err := kbIntParam(c, "n", "knowledge version")
	if err != nil {
		return err
	}
	v, err := s.db.GetKnowledgeVersion(c.UserContext(), kbCaller(c), c.Params("org"), c.Params("id"), n)
	if err != nil {
		return err
	}
	return c.JSON(v)
}

func (s *Server) searchKnowledge(c *fiber.Ctx) error {
	limit, err := kbQueryInt(c, "limit")
	if err != nil {
		return err
	}
	var legs searchLegs
	hits, err := s.db.SearchKnowledge(c.UserContext(), kbCaller(c), c.Params("org"), store.KnowledgeSearch{
		Q: c.Query("q"), Kind: c.Query("kind"), Project: c.Query("project"), Limit: limit,
		Embedders: legs.watch(s.embedders)})
	if err != nil {
		return err
	}
	c.Set(searchLegsHeader, legs.String())
	return c.JSON(kbItems(hits))
}
