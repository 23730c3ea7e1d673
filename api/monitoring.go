package api

import (
	"bytes"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"

	"github.com/balletplanner/ballet/store"
)

// MonitoringPath is where the asynq dashboard is mounted.
const MonitoringPath = "/monitoring"

// tokenCookie carries an API token for browser pages such as the dashboard:
// one made for the browser's session, never the token the user gave.
const tokenCookie = "ballet_token"

// dashboardSession is the longest life of the dashboard's cookie token.
const dashboardSession = 12 * time.Hour

// monitoringAssets are the dashboard's static files at its root: code and
// icons of the asynqmon build, the same for everyone, served without a
// token because browsers fetch some of them (the web app manifest) without
// cookies. Everything else, its index and its api, needs a platform admin.
var monitoringAssets = map[string]bool{
	"manifest.json": true, "asset-manifest.json": true, "favicon.ico": true,
	"favicon-16x16.png": true, "favicon-32x32.png": true, "apple-touch-icon.png": true,
	"android-chrome-192x192.png": true, "android-chrome-512x512.png": true,
}

// mountMonitoring serves the dashboard at MonitoringPath: its static files
// to anyone, the rest to platform admins signed in by bearer header or the
// token cookie, every response with the security headers. Its pages link to
// nothing on the internet (offlinePages).
func (s *Server) mountMonitoring(mon http.Handler) {
	mon = offlinePages(mon)
	page := adaptor.HTTPHandler(mon)
	headers := SecurityHeaders(HTMLPolicy{ScriptHashes: InlineScriptHashes(mon, MonitoringPath+"/")})
	s.app.Use(MonitoringPath, headers, func(c *fiber.Ctx) error {
		if isMonitoringAsset(c) {
			return page(c)
		}
		return c.Next()
	}, s.authenticateBrowser, s.requirePlatformAdmin, page)
}

// isMonitoringAsset reports whether the request reads one of the
// dashboard's static files.
func isMonitoringAsset(c *fiber.Ctx) bool {
	if c.Method() != fiber.MethodGet && c.Method() != fiber.MethodHead {
		return false
	}
	rest, ok := strings.CutPrefix(c.Path(), MonitoringPath+"/")
	if !ok || strings.Contains(rest, "..") {
		return false
	}
	return monitoringAssets[rest] || strings.HasPrefix(rest, "static/js/") || strings.HasPrefix(rest, "static/media/")
}

// authenticateBrowser accepts the bearer header, or the token cookie. A
// first visit with ?token=… is checked first: a valid token becomes the
// cookie and the browser is sent back to the same page without it (its
// other parameters kept); an invalid one is 401 and sets nothing.
func (s *Server) authenticateBrowser(c *fiber.Ctx) error {
	if t := c.Query("token"); t != "" {
		c.Request().Header.Set(fiber.HeaderAuthorization, "Bearer "+t)
		if err := s.identify(c); err != nil {
			return err
		}
		// The cookie holds a token of its own, never the one given: it
		// lives dashboardSession at most, and no longer than the token
		// given when that is a JWT.
		ttl := dashboardSession
		if exp := jwtExpiry(t); exp != nil {
			ttl = min(ttl, time.Until(*exp).Truncate(time.Second))
		}
		if ttl < time.Second {
			return store.Errorf(store.CodeUnauthenticated, "the token has expired")
		}
		session, _, err := s.db.CreateAPIToken(c.UserContext(), principal(c).Subject, "dashboard session", ttl)
		if err != nil {
			return err
		}
		// Secure over https, also behind a TLS-terminating proxy named in
		// server.trusted_proxies (its X-Forwarded-Proto is believed).
		c.Cookie(&fiber.Cookie{Name: tokenCookie, Value: session, Path: MonitoringPath, HTTPOnly: true,
			SameSite: "Strict", Secure: c.Protocol() == "https", MaxAge: int(ttl / time.Second)})
		q, err := url.ParseQuery(string(c.Request().URI().QueryString()))
		if err != nil {
			return store.Errorf(store.CodeInvalid, "query: %v", err)
		}
		q.Del("token")
		loc := c.Path()
		if enc := q.Encode(); enc != "" {
			loc += "?" + enc
		}
		return c.Redirect(loc, fiber.StatusSeeOther)
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

// externalRef is a stylesheet link or script tag that loads from another
// host: asynqmon's index links Google Fonts (Roboto and Material Icons).
var externalRef = regexp.MustCompile(`(?i)<link\b[^>]*\bhref="(?:https?:)?//[^"]*"[^>]*>|<script\b[^>]*\bsrc="(?:https?:)?//[^"]*"[^>]*>\s*</script>`)

// offlinePages serves the dashboard's HTML pages without the tags that
// would load from the internet, so that it renders the same offline and
// under the pages' Content-Security-Policy: the text falls back to the
// system's sans-serif font, and the icons are the bundle's own SVGs. Its web
// app manifest names its icons under the dashboard. Its other answers
// (scripts, images, its api) pass through as they are.
func offlinePages(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rest := strings.TrimPrefix(r.URL.Path, MonitoringPath)
		if strings.HasPrefix(rest, "/api/") || strings.HasPrefix(rest, "/static/") {
			h.ServeHTTP(w, r)
			return
		}
		rec := &pageRecorder{header: http.Header{}, status: http.StatusOK}
		h.ServeHTTP(rec, r)
		body := rec.body.Bytes()
		ct := rec.header.Get("Content-Type")
		if ct == "" {
			ct = http.DetectContentType(body)
		}
		switch {
		case strings.HasPrefix(ct, "text/html"):
			body = externalRef.ReplaceAll(body, nil)
		case rest == "/manifest.json":
			// Its icons are named from the site's root, not the dashboard's.
			body = bytes.ReplaceAll(body, []byte(`"src": "/`), []byte(`"src": "`+MonitoringPath+`/`))
			ct = "application/manifest+json"
		}
		rec.header.Set("Content-Type", ct)
		rec.header.Set("Content-Length", strconv.Itoa(len(body)))
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.status)
		_, _ = w.Write(body)
	})
}

// pageRecorder holds an answer for offlinePages to rewrite.
type pageRecorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (p *pageRecorder) Header() http.Header         { return p.header }
func (p *pageRecorder) WriteHeader(status int)      { p.status = status }
func (p *pageRecorder) Write(b []byte) (int, error) { return p.body.Write(b) }
