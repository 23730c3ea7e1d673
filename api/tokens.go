package api

import (
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/balletplanner/ballet/store"
)

func (s *Server) registerTokens(r fiber.Router) {
	r.Post("/tokens", s.createToken)
	r.Get("/tokens", s.listTokens)
	r.Delete("/tokens/:id", s.revokeToken)
}

type createTokenRequest struct {
	Name string `json:"name"`
	// TTL is a Go duration such as "720h"; empty is auth.token_max_ttl.
	TTL string `json:"ttl"`
}

// createToken makes an API token for the caller. It lives at most
// auth.token_max_ttl, and never beyond the JWT the caller signed in with:
// a short-lived sign-in cannot mint a long-lived credential.
func (s *Server) createToken(c *fiber.Ctx) error {
	var req createTokenRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	maxTTL := s.auth.tokenMaxTTL()
	ttl := maxTTL
	if req.TTL != "" {
		d, err := time.ParseDuration(req.TTL)
		if err != nil || d <= 0 {
			return store.Errorf(store.CodeInvalid, "ttl: must be a positive duration such as \"720h\", got %q", req.TTL)
		}
		if d > maxTTL {
			return store.Errorf(store.CodeInvalid, "ttl: at most %s (auth.token_max_ttl), got %s", maxTTL, d)
		}
		ttl = d
	}
	if raw, ok := bearer(c.Get(fiber.HeaderAuthorization)); ok && !strings.HasPrefix(raw, store.TokenPrefix) {
		if exp := jwtExpiry(raw); exp != nil {
			left := time.Until(*exp).Truncate(time.Second)
			if left < time.Second {
				return store.Errorf(store.CodeUnauthenticated, "the token you signed in with has expired")
			}
			ttl = min(ttl, left)
		}
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
