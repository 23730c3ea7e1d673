package api

import (
	"github.com/gofiber/fiber/v2"

	"github.com/balletplanner/ballet/store"
)

func (s *Server) registerSearch(r fiber.Router) {
	r.Get("/search", s.search)
}

// search is GET /search?q&kind=item|skill&project&limit.
func (s *Server) search(c *fiber.Ctx) error {
	limit, err := kbQueryInt(c, "limit")
	if err != nil {
		return err
	}
	hits, err := s.db.Search(c.UserContext(), kbCaller(c), store.SearchQuery{
		Q: c.Query("q"), Kind: c.Query("kind"), Project: c.Query("project"), Limit: limit})
	if err != nil {
		return err
	}
	return c.JSON(kbItems(hits))
}
