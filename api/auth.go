package api

import (
	"context"
	"net"
	"net/url"
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
	if err := s.identify(c); err != nil {
		return err
	}
	return c.Next()
}

// identify resolves the request's bearer token (or local mode) to the
// principal kept in the request's locals.
func (s *Server) identify(c *fiber.Ctx) error {
	if s.auth.Mode == AuthLocal {
		if err := s.checkLoopback(c); err != nil {
			return err
		}
		c.Locals(principalKey, localPrincipal)
		return nil
	}
	token, ok := bearer(c.Get(fiber.HeaderAuthorization))
	if !ok {
		return store.Errorf(store.CodeUnauthenticated, "missing bearer token in the Authorization header")
	}
	subject, err := s.checkToken(c.UserContext(), s.remote(c), token)
	if err != nil {
		if wait := retryAfterOf(err); wait != "" {
			c.Set(fiber.HeaderRetryAfter, wait)
		}
		return err
	}
	p, err := s.db.Principal(c.UserContext(), subject)
	if err != nil {
		return err
	}
	c.Locals(principalKey, p)
	return nil
}

// subjectOf checks a token: an API token, else a JWT of the OIDC issuer
// when auth.oidc.issuer_url is set.
func (s *Server) subjectOf(ctx context.Context, token string) (string, error) {
	if strings.HasPrefix(token, store.TokenPrefix) {
		return s.db.AuthenticateToken(ctx, token)
	}
	if s.oidc != nil {
		return s.oidcSubject(ctx, token)
	}
	return "", store.Errorf(store.CodeUnauthenticated, "invalid token")
}

// checkLoopback refuses, in local mode, a request whose Host or Origin
// (when sent) is not a loopback name or address with the server's port, so
// that neither another site nor a DNS-rebound name reaches the local admin.
func (s *Server) checkLoopback(c *fiber.Ctx) error {
	port := s.listenPort()
	if host := string(c.Request().Host()); !isLoopbackHost(host, port) {
		return store.Errorf(store.CodeForbidden,
			"auth.mode local answers only loopback requests: Host %q is not localhost, 127.0.0.0/8 or [::1] on port %s", host, port)
	}
	origin := c.Get(fiber.HeaderOrigin)
	if origin == "" {
		return nil
	}
	u, err := url.Parse(origin)
	ok := err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Opaque == ""
	if ok {
		host := u.Host
		if u.Port() == "" { // the scheme's own port
			host = net.JoinHostPort(u.Hostname(), map[string]string{"http": "80", "https": "443"}[u.Scheme])
		}
		ok = isLoopbackHost(host, port)
	}
	if !ok {
		return store.Errorf(store.CodeForbidden,
			"auth.mode local answers only loopback requests: Origin %q is not localhost, 127.0.0.0/8 or [::1] on port %s", origin, port)
	}
	return nil
}

// listenPort is the port the server listens on ("" when unknown).
func (s *Server) listenPort() string {
	addr := s.cfg.Addr
	if a := s.Addr(); a != "" {
		addr = a
	}
	_, port, _ := net.SplitHostPort(addr)
	return port
}

// isLoopbackHost reports whether hostport is localhost, an address of
// 127.0.0.0/8 or [::1], with port (any port when port is "" or "0"; a
// hostport without a port stands for 80).
func isLoopbackHost(hostport, port string) bool {
	host, p, err := net.SplitHostPort(hostport)
	if err != nil {
		host, p = strings.Trim(hostport, "[]"), "80"
	}
	if port != "" && port != "0" && p != port {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
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
