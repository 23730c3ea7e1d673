package api

import (
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/balletplanner/ballet/internal/httpmetrics"
)

// useHTTPMetrics counts and times every request by route pattern, on reg
// (nothing without one). The gateway registers the same two families in
// `ballet serve`: the service label tells them apart, and one registration
// is shared.
func (s *Server) useHTTPMetrics(reg *prometheus.Registry) error {
	if reg == nil {
		return nil
	}
	families, err := httpmetrics.Register(reg)
	if err != nil {
		return err
	}
	var (
		once   sync.Once
		routes map[string]bool // "METHOD /pattern" of every route but middleware
	)
	s.app.Use(func(c *fiber.Ctx) error {
		start := time.Now()
		once.Do(func() {
			routes = map[string]bool{}
			for _, r := range s.app.GetRoutes(true) {
				routes[r.Method+" "+r.Path] = true
			}
		})
		if err := c.Next(); err != nil {
			// Answer the error here, so that the status counted is the one sent.
			if err := s.handleError(c, err); err != nil {
				return err
			}
		}
		status := c.Response().StatusCode()
		route := httpmetrics.Unmatched
		if r := c.Route(); routes[r.Method+" "+r.Path] || status != fiber.StatusNotFound {
			// A middleware that answered itself (the web app at "/", the
			// dashboard) is labelled with its prefix.
			route = r.Path
		}
		families.Observe("api", route, c.Method(), status, start)
		return nil
	})
	return nil
}
