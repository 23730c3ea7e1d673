package api

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/hibiken/asynq"
	"github.com/hibiken/asynqmon"

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
// cookies. Everything else, its index and its api, needs a role bound at
// platform scope (dashboardSignIn).
var monitoringAssets = map[string]bool{
	"manifest.json": true, "asset-manifest.json": true, "favicon.ico": true,
	"favicon-16x16.png": true, "favicon-32x32.png": true, "apple-touch-icon.png": true,
	"android-chrome-192x192.png": true, "android-chrome-512x512.png": true,
}

// Monitoring is the asynq dashboard (asynqmon) in its two modes: with its
// buttons for platform admins, read-only for the other roles bound at
// platform scope. Payloads and results show as text (dashboardText).
type Monitoring struct {
	admin, readOnly *asynqmon.HTTPHandler
}

// NewMonitoring builds the dashboard on conn; Close it.
func NewMonitoring(conn asynq.RedisConnOpt) *Monitoring {
	opts := asynqmon.Options{RootPath: MonitoringPath, RedisConnOpt: conn,
		PayloadFormatter: asynqmon.PayloadFormatterFunc(dashboardText), ResultFormatter: asynqmon.ResultFormatterFunc(dashboardText)}
	m := &Monitoring{admin: asynqmon.New(opts)}
	opts.ReadOnly = true
	m.readOnly = asynqmon.New(opts)
	return m
}

// Close closes both modes' Redis clients.
func (m *Monitoring) Close() error { return errors.Join(m.admin.Close(), m.readOnly.Close()) }

// dashboardText is how the dashboard shows a task's payload or result:
// as it is when it is text (ballet's are JSON), "(empty)" when there is
// none, else its size. asynqmon's own formatter says "non-printable bytes"
// for both.
func dashboardText(_ string, b []byte) string {
	switch {
	case len(bytes.TrimSpace(b)) == 0:
		return "(empty)"
	case utf8.Valid(b) && !bytes.ContainsFunc(b, func(r rune) bool { return !unicode.IsPrint(r) && !unicode.IsSpace(r) }):
		return string(b)
	}
	return fmt.Sprintf("(%d bytes, not text)", len(b))
}

// mountMonitoring serves the dashboard at MonitoringPath: its static files
// to anyone, the rest to the roles bound at platform scope signed in by
// bearer header or the token cookie (dashboardSignIn: a refused browser
// gets a sign-in page), with its buttons for platform admins only, which
// dashboardActions checks first; every response with the security headers.
// Its pages link to nothing on the internet (offlinePages).
func (s *Server) mountMonitoring(m *Monitoring) {
	admin, readOnly := offlinePages(m.admin), offlinePages(m.readOnly)
	hashes := append(InlineScriptHashes(admin, MonitoringPath+"/"), InlineScriptHashes(readOnly, MonitoringPath+"/")...)
	slices.Sort(hashes)
	hashes = slices.Compact(hashes)
	headers := SecurityHeaders(HTMLPolicy{ScriptHashes: hashes})
	adminPage, readOnlyPage := adaptor.HTTPHandler(admin), adaptor.HTTPHandler(readOnly)
	s.app.Use(MonitoringPath, headers, func(c *fiber.Ctx) error {
		if isMonitoringAsset(c) {
			return adminPage(c)
		}
		return c.Next()
	}, s.dashboardSignIn, s.dashboardActions, func(c *fiber.Ctx) error {
		if principal(c).IsPlatformAdmin() {
			return adminPage(c)
		}
		return readOnlyPage(c)
	})
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

// requirePlatformScope refuses a principal not bound at platform scope:
// the dashboard shows every organization's tasks.
func requirePlatformScope(c *fiber.Ctx) error {
	p := principal(c)
	if p != nil && slices.ContainsFunc(p.Bindings, func(b store.RoleBinding) bool { return b.Scope.Kind == store.ScopePlatform }) {
		return nil
	}
	return store.Errorf(store.CodeForbidden, "the queue dashboard is for roles bound at platform scope (its buttons for platform-admin)")
}

// externalRef is a stylesheet link or script tag that loads from another
// host: asynqmon's index links Google Fonts (Roboto and Material Icons).
var externalRef = regexp.MustCompile(`(?i)<link\b[^>]*\bhref="(?:https?:)?//[^"]*"[^>]*>|<script\b[^>]*\bsrc="(?:https?:)?//[^"]*"[^>]*>\s*</script>`)

// offlinePages serves the dashboard's HTML pages without the tags that
// would load from the internet, so that it renders the same offline and
// under the pages' Content-Security-Policy: the text falls back to the
// system's sans-serif font, and the icons are the bundle's own SVGs. Each
// page gets the notice script (noticeJS). Its web
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
			body = bytes.Replace(body, []byte("</head>"), noticeScript, 1)
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

// noticeJS shows the reasons and notices of the dashboard's buttons
// (dashboardActions); offlinePages puts it inline at the end of each page's
// head, after asynqmon's flags, where the pages' CSP allows it by its hash.
//
//go:embed monitoring_notice.js
var noticeJS []byte

var noticeScript = []byte("<script>" + string(noticeJS) + "</script></head>")

// pageRecorder holds an answer for offlinePages to rewrite.
type pageRecorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (p *pageRecorder) Header() http.Header         { return p.header }
func (p *pageRecorder) WriteHeader(status int)      { p.status = status }
func (p *pageRecorder) Write(b []byte) (int, error) { return p.body.Write(b) }
