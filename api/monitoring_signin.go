package api

import (
	"bytes"
	"html/template"
	"net/url"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/balletplanner/ballet/store"
)

// dashboardSignIn lets into the dashboard the roles bound at platform scope
// (requirePlatformScope), signed in by bearer header, the token cookie, or
// a token given once (signInBrowser). A browser that is refused gets a
// page saying why with a form to try another token; the dashboard's api
// and clients that ask for JSON keep the JSON error.
func (s *Server) dashboardSignIn(c *fiber.Ctx) error {
	redirected, err := s.signInBrowser(c)
	if err != nil {
		if wantsSignInPage(c) {
			return s.signInPage(c, err)
		}
		return err
	}
	if redirected {
		return nil
	}
	return c.Next()
}

// signInBrowser identifies the request by its bearer header, or the token
// cookie. A token given once, as ?token=… or posted by the sign-in page's
// form, is checked first: a valid one becomes the cookie and the browser is
// sent back to the same page without it (its other parameters kept); an
// invalid one sets nothing.
func (s *Server) signInBrowser(c *fiber.Ctx) (redirected bool, err error) {
	t := c.Query("token")
	if t == "" && c.Method() == fiber.MethodPost && !strings.HasPrefix(c.Path(), MonitoringPath+"/api/") &&
		strings.HasPrefix(c.Get(fiber.HeaderContentType), fiber.MIMEApplicationForm) {
		t = c.FormValue("token")
	}
	if t == "" {
		if c.Get(fiber.HeaderAuthorization) == "" {
			if t := c.Cookies(tokenCookie); t != "" {
				c.Request().Header.Set(fiber.HeaderAuthorization, "Bearer "+t)
			}
		}
		if err := s.identify(c); err != nil {
			return false, err
		}
		return false, requirePlatformScope(c)
	}
	c.Request().Header.Set(fiber.HeaderAuthorization, "Bearer "+t)
	if err := s.identify(c); err != nil {
		return false, err
	}
	if err := requirePlatformScope(c); err != nil {
		return false, err
	}
	// The cookie holds a token of its own, never the one given: it lives
	// dashboardSession at most, and no longer than the token given when
	// that is a JWT.
	ttl := dashboardSession
	if exp := jwtExpiry(t); exp != nil {
		ttl = min(ttl, time.Until(*exp).Truncate(time.Second))
	}
	if ttl < time.Second {
		return false, store.Errorf(store.CodeUnauthenticated, "the token has expired")
	}
	session, _, err := s.db.CreateAPIToken(c.UserContext(), principal(c).Subject, "dashboard session", ttl)
	if err != nil {
		return false, err
	}
	// Secure over https, also behind a TLS-terminating proxy named in
	// server.trusted_proxies (its X-Forwarded-Proto is believed).
	c.Cookie(&fiber.Cookie{Name: tokenCookie, Value: session, Path: MonitoringPath, HTTPOnly: true,
		SameSite: "Strict", Secure: c.Protocol() == "https", MaxAge: int(ttl / time.Second)})
	q, err := url.ParseQuery(string(c.Request().URI().QueryString()))
	if err != nil {
		return false, store.Errorf(store.CodeInvalid, "query: %v", err)
	}
	q.Del("token")
	loc := c.Path()
	if enc := q.Encode(); enc != "" {
		loc += "?" + enc
	}
	return true, c.Redirect(loc, fiber.StatusSeeOther)
}

// wantsSignInPage reports whether a refused request is a browser's page:
// not the dashboard's api, and HTML preferred to JSON (a browser's
// navigation asks for text/html first; no Accept, or */*, gets JSON).
func wantsSignInPage(c *fiber.Ctx) bool {
	return !strings.HasPrefix(c.Path(), MonitoringPath+"/api/") &&
		c.Accepts(fiber.MIMEApplicationJSON, fiber.MIMETextHTML) == fiber.MIMETextHTML
}

// signInPageHTML is the page a refused browser gets. It runs no script: the
// form posts the token to the same page, which keeps it out of the URL.
var signInPageHTML = template.Must(template.New("signin").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>Queue dashboard: sign in</title>
<style>body{font-family:system-ui,sans-serif;max-width:34rem;margin:4rem auto;padding:0 1rem;line-height:1.5}
p.refusal{border-left:4px solid #b3261e;padding:.5rem .75rem;background:#fdecea}
input{width:100%;padding:.4rem;margin:.25rem 0 .75rem;box-sizing:border-box}button{padding:.4rem 1rem}</style>
</head><body><main>
<h1>Queue dashboard</h1>
<p class="refusal" role="alert">{{.Message}}</p>
<form method="post" action="{{.Action}}">
<label for="token">API token</label>
<input id="token" name="token" type="password" autocomplete="off" required autofocus>
<button type="submit">Sign in</button>
</form>
<p>The dashboard is for roles bound at platform scope; its buttons are for platform-admin.
Create a token with <code>ballet admin token create --subject …</code> or <code>POST /api/v1/tokens</code>.</p>
</main></body></html>
`))

// signInPage answers a refused browser with the sign-in page, under the
// refusal's status.
func (s *Server) signInPage(c *fiber.Ctx, err error) error {
	se := store.AsError(err)
	if se == nil {
		return err
	}
	var msg string
	switch {
	case se.Code == store.CodeUnauthenticated && c.Query("token") == "" && c.Method() != fiber.MethodPost && c.Cookies(tokenCookie) == "":
		msg = "Sign in with an API token."
	case se.Code == store.CodeUnauthenticated && c.Query("token") == "" && c.Method() != fiber.MethodPost:
		msg = "Your dashboard session has ended (" + se.Message + "). Sign in again."
	case se.Code == store.CodeUnauthenticated:
		msg = "The token was not accepted: " + se.Message + ". Check it and try again."
	default:
		msg = "You cannot open the queue dashboard: " + se.Message + "."
	}
	action := c.Path()
	if q, perr := url.ParseQuery(string(c.Request().URI().QueryString())); perr == nil {
		q.Del("token")
		if enc := q.Encode(); enc != "" {
			action += "?" + enc
		}
	}
	var page bytes.Buffer
	if terr := signInPageHTML.Execute(&page, struct{ Message, Action string }{msg, action}); terr != nil {
		return err
	}
	c.Set(fiber.HeaderCacheControl, "no-store")
	c.Type("html", "utf-8")
	return c.Status(httpStatus[se.Code]).Send(page.Bytes())
}
