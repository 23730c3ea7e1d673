package api

import (
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/balletplanner/ballet/store"
)

// MonitoringPath is where the asynq dashboard is mounted.
const MonitoringPath = "/monitoring"

// tokenCookie carries an API token for browser pages such as the dashboard.
const tokenCookie = "ballet_token"

// authenticateBrowser accepts the bearer header, or the token cookie that a
// first visit with ?token=… sets (then redirects without it), so that the
// dashboard opens in a browser.
func (s *Server) authenticateBrowser(c *fiber.Ctx) error {
	if t := c.Query("token"); t != "" {
		c.Cookie(&fiber.Cookie{Name: tokenCookie, Value: t, Path: MonitoringPath, HTTPOnly: true,
			SameSite: "Strict", Secure: c.Protocol() == "https"})
		return c.Redirect(strings.SplitN(c.OriginalURL(), "?", 2)[0], fiber.StatusSeeOther)
	}
	if c.Get(fiber.HeaderAuthorization) == "" {
		if t := c.Cookies(tokenCookie); t != "" {
			c.Request().Header.Set(fiber.HeaderAuthorization, "Bearer "+t)
		}
	}
	return s.authenticate(c)
}

// requirePlatformAdmin lets only platform admins through.
func (s *Server) requirePlatformAdmin(c *fiber.Ctx) error {
	if !principal(c).IsPlatformAdmin() {
		return store.Errorf(store.CodeForbidden, "the queue dashboard is for platform-admin only")
	}
	return c.Next()
}
