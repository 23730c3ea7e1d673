package api

import (
	"strconv"

	"github.com/gofiber/fiber/v2"

	"github.com/balletplanner/ballet/store"
)

// registerKnowledgeBase registers the skill, knowledge and search routes
// (SPEC §5, §6, §10).
func (s *Server) registerKnowledgeBase(r fiber.Router) {
	r.Get("/skills", s.listSkills)
	r.Post("/skills", s.createSkill)
	r.Get("/skills/:skill", s.getSkill)
	r.Patch("/skills/:skill", s.updateSkillDraft)
	r.Post("/skills/:skill/publish", s.publishSkill)
	r.Get("/skills/:skill/versions", s.listSkillVersions)
	r.Get("/skills/:skill/versions/:n", s.getSkillVersion)
	r.Get("/projects/:project/skills", s.projectSkills)
	r.Get("/projects/:project/skill-pins", s.skillPins)
	r.Put("/projects/:project/skills/:name/pin", s.pinSkill)
	r.Delete("/projects/:project/skills/:name/pin", s.unpinSkill)
	s.registerKnowledge(r)
	s.registerSearch(r)
}

// kbCaller is the request's human acting for themselves.
func kbCaller(c *fiber.Ctx) store.Caller { return store.HumanCaller(principal(c)) }

// kbItems wraps a list as {"items": [...]}, never null.
func kbItems[T any](items []T) fiber.Map {
	if items == nil {
		items = []T{}
	}
	return fiber.Map{"items": items}
}

// kbIntParam reads a positive integer path parameter; anything else is not
// found, as no such version can exist.
func kbIntParam(c *fiber.Ctx, name, what string) (int, error) {
	n, err := strconv.Atoi(c.Params(name))
	if err != nil || n < 1 {
		return 0, store.Errorf(store.CodeNotFound, "%s %q not found", what, c.Params(name))
	}
	return n, nil
}

// kbQueryInt reads an optional positive integer query parameter (0 when
// absent).
func kbQueryInt(c *fiber.Ctx, name string) (int, error) {
	v := c.Query(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, store.Errorf(store.CodeInvalid, "%s: must be an integer, got %q", name, v)
	}
	if n < 1 {
		return 0, store.Errorf(store.CodeInvalid, "%s: must be at least 1, got %d", name, n)
	}
	return n, nil
}

func (s *Server) listSkills(c *fiber.Ctx) error {
	list, err := s.db.ListSkills(c.UserContext(), kbCaller(c), c.Query("scope"))
	if err != nil {
		return err
	}
	return c.JSON(kbItems(list))
}

func (s *Server) createSkill(c *fiber.Ctx) error {
	var req store.NewSkill
	if err := decode(c, &req); err != nil {
		return err
	}
	sk, err := s.db.CreateSkill(c.UserContext(), kbCaller(c), req)
	if err != nil {
		return err
	}
	return c.Status(fiber.StatusCreated).JSON(sk)
}

func (s *Server) getSkill(c *fiber.Ctx) error {
	sk, err := s.db.GetSkill(c.UserContext(), kbCaller(c), c.Params("skill"))
	if err != nil {
		return err
	}
	return c.JSON(sk)
}

func (s *Server) updateSkillDraft(c *fiber.Ctx) error {
	var req store.SkillDraftUpdate
	if err := decode(c, &req); err != nil {
		return err
	}
	sk, err := s.db.UpdateSkillDraft(c.UserContext(), kbCaller(c), c.Params("skill"), req)
	if err != nil {
		return err
	}
	return c.JSON(sk)
}

func (s *Server) publishSkill(c *fiber.Ctx) error {
	var none struct{} // publish takes no fields; a body, if any, must be {}
	if err := decodeOptional(c, &none); err != nil {
		return err
	}
	v, err := s.db.PublishSkill(c.UserContext(), kbCaller(c), c.Params("skill"))
	if err != nil {
		return err
	}
	return c.Status(fiber.StatusCreated).JSON(v)
}

func (s *Server) listSkillVersions(c *fiber.Ctx) error {
	vs, err := s.db.ListSkillVersions(c.UserContext(), kbCaller(c), c.Params("skill"))
	if err != nil {
		return err
	}
	return c.JSON(kbItems(vs))
}

func (s *Server) getSkillVersion(c *fiber.Ctx) error {
	n, err := kbIntParam(c, "n", "skill version")
	if err != nil {
		return err
	}
	v, err := s.db.GetSkillVersion(c.UserContext(), kbCaller(c), c.Params("skill"), n)
	if err != nil {
		return err
	}
	return c.JSON(v)
}

func (s *Server) projectSkills(c *fiber.Ctx) error {
	eff, err := s.db.ProjectSkills(c.UserContext(), kbCaller(c), c.Params("project"))
	if err != nil {
		return err
	}
	return c.JSON(kbItems(eff))
}

func (s *Server) skillPins(c *fiber.Ctx) error {
	pins, err := s.db.SkillPins(c.UserContext(), kbCaller(c), c.Params("project"))
	if err != nil {
		return err
	}
	return c.JSON(kbItems(pins))
}

func (s *Server) pinSkill(c *fiber.Ctx) error {
	var req store.SkillPinSpec
	if err := decode(c, &req); err != nil {
		return err
	}
	pin, err := s.db.PinSkill(c.UserContext(), kbCaller(c), c.Params("project"), c.Params("name"), req)
	if err != nil {
		return err
	}
	return c.JSON(pin)
}

func (s *Server) unpinSkill(c *fiber.Ctx) error {
	if err := s.db.UnpinSkill(c.UserContext(), kbCaller(c), c.Params("project"), c.Params("name")); err != nil {
		return err
	}
	return c.SendStatus(fiber.StatusNoContent)
}
