package api

import (
	"strings"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/cors"
)

// corsMaxAge is how long, in seconds, a browser may keep a preflight's answer.
const corsMaxAge = 600

// useCORS lets the browser origins of server.cors_allowed_origins call
// /api/v1 (Fiber's cors middleware): a preflight OPTIONS from one of them is
// answered 204 before authentication, and every answer to one of them
// carries Access-Control-Allow-Origin. With none configured (the default)
// nothing is added and a browser on another origin is refused by its own
// same-origin policy. A preflight from an origin not listed is answered 204
// without Access-Control-Allow-Origin, which the browser refuses.
func (s *Server) useCORS() {
	if len(s.cfg.CORSAllowedOrigins) == 0 {
		return
	}
	s.app.Use("/api/v1", cors.New(cors.Config{
		AllowOrigins: strings.Join(s.cfg.CORSAllowedOrigins, ","),
		AllowMethods: strings.Join([]string{fiber.MethodGet, fiber.MethodHead, fiber.MethodPost, fiber.MethodPut,
			fiber.MethodPatch, fiber.MethodDelete}, ","),
		AllowHeaders: strings.Join([]string{fiber.HeaderAuthorization, fiber.HeaderContentType, fiber.HeaderAccept,
			"Last-Event-ID", fiber.HeaderXRequestID}, ","),
		ExposeHeaders: strings.Join([]string{fiber.HeaderXRequestID, fiber.HeaderRetryAfter, fiber.HeaderLocation}, ","),
		MaxAge:        corsMaxAge,
	}))
}
