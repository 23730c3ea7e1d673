package api

import (
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/balletplanner/ballet/store"
)

const principalKey = "ballet.principal"

// localPrincipal is the one subject of auth.mode = "local".
var localPrincipal = &store.Principal{Subject: "local", Kind: store.ActorHuman, Bindings: []store.RoleBinding{
	{Subject: "local", Role: store.RolePlatformAdmin, Scope: store.Scope{Kind: store.ScopePlatform}},
}}

// authenticate resolves the bearer token to a principal, or answers 401.
func (s *Server) authenticate(c *fiber.Ctx) error {
	if s.auth.Mode == AuthLocal {
		c.Locals(principalKey, localPrincipal)
		return c.Next()
	}
	token, ok := bearer(c.Get(fiber.HeaderAuthorization))
	if !ok {
		return store.Errorf(store.CodeUnauthenticated, "missing bearer token in the Authorization header")
	}
	subject, err := s.subjectOf(c, token)
	if err != nil {
		return err
	}
	p, err := s.db.Principal(c.UserContext(), subject)
	if err != nil {
		return err
	}
	c.Locals(principalKey, p)
	return c.Next()
}

// subjectOf checks a token: an API token, else a JWT of the OIDC issuer
// when auth.oidc.issuer_url is set.
func (s *Server) subjectOf(c *fiber.Ctx, token string) (string, error) {
	if strings.HasPrefix(token, store.TokenPrefix) {
		return s.db.AuthenticateToken(c.UserContext(), token)
	}
	if s.oidc != nil {
		return s.oidcSubject(c.UserContext(), token)
	}
	return "", store.Errorf(store.CodeUnauthenticated, "invalid token")
}

func bearer(h string) (string, bool) {
	const p = "Bearer "
	if len(h) <= len(p) || !strings.EqualFold(h[:len(p)], p) {
		return "", false
	}
	return strings.TrimSpace(h[len(p):]), true
}

// principal is the authenticated caller of the request.
func principal(c *fiber.Ctx) *store.Principal {
	p, _ := c.Locals(principalKey).(*store.Principal)
	return p
}
