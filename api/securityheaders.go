package api

import (
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"

	"github.com/gofiber/fiber/v2"
)

// HTMLPolicy is what a page served through SecurityHeaders may load beyond
// its own origin's files.
type HTMLPolicy struct {
	// ScriptHashes are CSP sources ('sha256-…') of the page's inline
	// scripts; no other inline script runs.
	ScriptHashes []string
}

// ContentSecurityPolicy is the policy's Content-Security-Policy: scripts,
// fonts, images and connections from the page's origin only, inline styles
// allowed (CSS-in-JS pages inject them), no plugins, no framing by any site.
func (p HTMLPolicy) ContentSecurityPolicy() string {
	script := "script-src 'self'"
	for _, h := range p.ScriptHashes {
		script += " '" + h + "'"
	}
	return strings.Join([]string{
		"default-src 'self'", script, "style-src 'self' 'unsafe-inline'",
		"img-src 'self' data:", "font-src 'self' data:", "connect-src 'self'",
		"object-src 'none'", "base-uri 'self'", "form-action 'self'", "frame-ancestors 'none'",
	}, "; ")
}

// SecurityHeaders is the middleware of every route that serves HTML: each
// response gets X-Content-Type-Options: nosniff, and an HTML one also gets
// the policy's Content-Security-Policy, X-Frame-Options: DENY and
// Referrer-Policy: no-referrer (so no token in a URL leaks to another site).
func SecurityHeaders(p HTMLPolicy) fiber.Handler {
	csp := p.ContentSecurityPolicy()
	return func(c *fiber.Ctx) error {
		err := c.Next()
		h := &c.Response().Header
		h.Set(fiber.HeaderXContentTypeOptions, "nosniff")
		if strings.HasPrefix(string(h.ContentType()), fiber.MIMETextHTML) {
			h.Set(fiber.HeaderContentSecurityPolicy, csp)
			h.Set(fiber.HeaderXFrameOptions, "DENY")
			h.Set(fiber.HeaderReferrerPolicy, "no-referrer")
		}
		return err
	}
}

// inlineScriptRe finds the inline scripts of a page (script tags without
// attributes, so without src).
var inlineScriptRe = regexp.MustCompile(`(?s)<script>(.*?)</script>`)

// InlineScriptHashes renders page (GET path) once and returns the CSP
// sources of its inline scripts, for a page such as the asynq dashboard
// whose index carries its boot code inline. It is called at start, on the
// page as built, before any request could put anything into it.
func InlineScriptHashes(page http.Handler, path string) []string {
	rec := httptest.NewRecorder()
	page.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	var out []string
	for _, m := range inlineScriptRe.FindAllStringSubmatch(rec.Body.String(), -1) {
		sum := sha256.Sum256([]byte(m[1]))
		out = append(out, "sha256-"+base64.StdEncoding.EncodeToString(sum[:]))
	}
	return out
}
