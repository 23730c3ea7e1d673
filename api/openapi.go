package api

import (
	_ "embed"

	"github.com/gofiber/fiber/v2"
)

// openAPIDocument is the OpenAPI 3.1 description of every /api/v1 route;
// TestOpenAPIMatchesRoutes keeps it and the registered routes in agreement.
//
//go:embed openapi.json
var openAPIDocument []byte

// OpenAPIPath is where the document is served.
const OpenAPIPath = "/api/v1/openapi.json"

// OpenAPI returns the embedded OpenAPI document.
func OpenAPI() []byte { return openAPIDocument }

// registerOpenAPI registers GET /openapi.json.
func (s *Server) registerOpenAPI(r fiber.Router) {
	r.Get("/openapi.json", s.openAPI)
}

func (s *Server) openAPI(c *fiber.Ctx) error {
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSONCharsetUTF8)
	c.Set(fiber.HeaderCacheControl, "public, max-age=300")
	return c.Send(openAPIDocument)
}
