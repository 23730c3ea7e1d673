package api

import (
	"strconv"

	"github.com/gofiber/fiber/v2"

	"github.com/balletplanner/ballet/store"
)

// registerTracker registers the tracker routes of SPEC §10: items,
// dependencies, runnable and changesets.
func (s *Server) registerTracker(r fiber.Router) {
	r.Get("/projects/:project/items", s.listItems)
	r.Post("/projects/:project/items", s.createItem)
	r.Get("/projects/:project/runnable", s.runnable)
	r.Get("/items/:item", s.getItem)
	r.Patch("/items/:item", s.patchItem)
	r.Post("/items/:item/transition", s.transitionItem)
	r.Get("/items/:item/history", s.itemHistory)
	r.Get("/items/:item/dependencies", s.listItemDependencies)
	r.Post("/items/:item/dependencies", s.addItemDependency)
	r.Delete("/dependencies/:id", s.deleteDependency)
	s.registerChangesets(r)
}

// trackerCaller is the authenticated subject acting for itself.
func trackerCaller(c *fiber.Ctx) store.Caller {
	p := principal(c)
	kind := p.Kind
	if kind == "" {
		kind = store.ActorHuman
	}
	return store.Caller{Principal: p, Actor: store.Actor{Kind: kind, Subject: p.Subject}}
}

func (s *Server) listItems(c *fiber.Ctx) error {
	f := store.ItemFilter{Kind: c.Query("kind"), State: c.Query("state"), Epic: c.Query("epic"),
		Milestone: c.Query("milestone")}
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return store.Errorf(store.CodeInvalid, "limit: must be a positive integer, got %q", v)
		}
		f.Limit = n
	}
	items, err := s.db.ListItems(c.UserContext(), trackerCaller(c), c.Params("project"), f)
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"items": items})
}

func (s *Server) createItem(c *fiber.Ctx) error {
	var in store.NewItem
	if err := decode(c, &in); err != nil {
		return err
	}
	it, err := s.db.CreateItem(c.UserContext(), trackerCaller(c), c.Params("project"), in)
	if err != nil {
		return err
	}
	return c.Status(fiber.StatusCreated).JSON(it)
}

func (s *Server) getItem(c *fiber.Ctx) error {
	it, err := s.db.GetItem(c.UserContext(), trackerCaller(c), c.Params("item"))
	if err != nil {
		return err
	}
	return c.JSON(it)
}

// patchItemRequest is a partial update with the version it was based on.
type patchItemRequest struct {
	Version *int64 `json:"version"`
	store.ItemPatch
}

func (s *Server) patchItem(c *fiber.Ctx) error {
	var req patchItemRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	if req.Version == nil {
		return store.Errorf(store.CodeInvalid, "version: required (the version you read)")
	}
	it, err := s.db.UpdateItem(c.UserContext(), trackerCaller(c), c.Params("item"), *req.Version, req.ItemPatch)
	if err != nil {
		return err
	}
	return c.JSON(it)
}

type transitionRequest struct {
	State   string `json:"state"`
	Version *int64 `json:"version"`
}

func (s *Server) transitionItem(c *fiber.Ctx) error {
	var req transitionRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	if req.State == "" {
		return store.Errorf(store.CodeInvalid, "state: required")
	}
	if req.Version == nil {
		return store.Errorf(store.CodeInvalid, "version: required (the version you read)")
	}
	it, err := s.db.TransitionItem(c.UserContext(), trackerCaller(c), c.Params("item"), req.State, *req.Version)
	if err != nil {
		return err
	}
	return c.JSON(it)
}

func (s *Server) itemHistory(c *fiber.Ctx) error {
	events, err := s.db.ItemHistory(c.UserContext(), trackerCaller(c), c.Params("item"))
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"items": events})
}

func (s *Server) listItemDependencies(c *fiber.Ctx) error {
	deps, err := s.db.ListDependencies(c.UserContext(), trackerCaller(c), c.Params("item"))
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"items": deps})
}

// addDependencyRequest adds "{item} <type> <body item>": the item of the
// path is the source (for blocks: the one the other waits for).
type addDependencyRequest struct {
	Type string `json:"type"`
	Item string `json:"item"`
}

func (s *Server) addItemDependency(c *fiber.Ctx) error {
	var req addDependencyRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	if req.Item == "" {
		return store.Errorf(store.CodeInvalid, "item: required")
	}
	d, err := s.db.AddDependency(c.UserContext(), trackerCaller(c), c.Params("item"), req.Item, req.Type)
	if err != nil {
		return err
	}
	return c.Status(fiber.StatusCreated).JSON(d)
}

func (s *Server) deleteDependency(c *fiber.Ctx) error {
	if err := s.db.DeleteDependency(c.UserContext(), trackerCaller(c), c.Params("id")); err != nil {
		return err
	}
	return c.SendStatus(fiber.StatusNoContent)
}

func (s *Server) runnable(c *fiber.Ctx) error {
	items, err := s.db.Runnable(c.UserContext(), trackerCaller(c), c.Params("project"))
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"items": items})
}
