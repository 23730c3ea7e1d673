package api

import (
	"time"

	"github.com/gofiber/fiber/v2"
)

func (s *Server) registerTokens(r fiber.Router) {
	r.Post("/tokens", s.createToken)
	r.Get("/tokens", s.listTokens)
	r.Delete("/tokens/:id", s.revokeToken)
}

type createTokenRequest struct {
	Name string `json:"name"`
	// TTL is a Go duration such as "720h"; empty means no expiry.
	TTL string `json:"ttl"`
}

// createToken makes an API token for the caller.
func (s *Server) createToken(c *fiber.Ctx) error {
	var req createTokenRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	var ttl time.Duration
	if req.TTL != "" {
		d, err := time.ParseDuration(req.TTL)
		if err != nil || d <= 0 {
			return fiber.NewError(fiber.StatusBadRequest, "ttl: must be a positive duration such as \"720h\"")
		}
		ttl = d
	}
	secret, tok, err := s.db.CreateAPIToken(c.UserContext(), principal(c).Subject, req.Name, ttl)
	if err != nil {
		return err
	}
	return c.Status(fiber.StatusCreated).JSON(fiber.Map{"token": secret, "id": tok.ID, "prefix": tok.Prefix,
		"name": tok.Name, "created_at": tok.CreatedAt, "expires_at": tok.ExpiresAt})
}

func (s *Server) listTokens(c *fiber.Ctx) error {
	toks, err := s.db.ListAPITokens(c.UserContext(), principal(c).Subject)
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"items": toks})
}

func (s *Server) revokeToken(c *fiber.Ctx) error {
	if err := s.db.RevokeAPIToken(c.UserContext(), principal(c).Subject, c.Params("id")); err != nil {
		return err
	}
	return c.SendStatus(fiber.StatusNoContent)
}
