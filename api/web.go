package api

import (
	"bytes"
	"errors"
	"io/fs"
	"mime"
	"path"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/balletplanner/ballet/api/web"
)

// appPrefixes are the paths the browser app never answers: the api's own.
var appPrefixes = []string{"/api/", "/rpc", "/healthz", "/readyz", "/metrics", "/openapi.json", MonitoringPath}

// localModeMeta tells the app, in its index.html, that the server runs in
// auth.mode local: without it and without a token of its own, the app
// shows its sign-in at once instead of asking the api and being refused.
const localModeMeta = `<meta name="ballet-auth" content="local" />`

// mountWebApp serves the embedded browser app at /: its files as they
// are, with long caching for the content-hashed assets, and index.html for
// every other GET of a path the api does not own, so the app's own routes
// load on a reload. It is registered last.
func (s *Server) mountWebApp() {
	s.mountWebFS(web.FS())
}

func (s *Server) mountWebFS(files fs.FS) {
	index, err := fs.ReadFile(files, "index.html")
	if err != nil {
		s.log.Warn("web app: no index.html in the bundle; / is not served", "error", err)
		return
	}
	if s.auth.Mode == AuthLocal {
		index = bytes.Replace(index, []byte("</head>"), []byte(localModeMeta+"</head>"), 1)
	}
	headers := SecurityHeaders(HTMLPolicy{})
	s.app.Use(func(c *fiber.Ctx) error {
		// Registered last: what reaches it matched no route of the api.
		if c.Method() != fiber.MethodGet && c.Method() != fiber.MethodHead {
			return fiber.ErrNotFound
		}
		p := c.Path()
		for _, pre := range appPrefixes {
			if p == strings.TrimSuffix(pre, "/") || strings.HasPrefix(p, pre) {
				return fiber.ErrNotFound
			}
		}
		return headers(c)
	}, func(c *fiber.Ctx) error {
		name := strings.TrimPrefix(path.Clean(c.Path()), "/")
		if name != "" && name != "index.html" {
			b, err := fs.ReadFile(files, name)
			switch {
			case err == nil:
				ct := mime.TypeByExtension(path.Ext(name))
				if ct == "" {
					ct = fiber.MIMEOctetStream
				}
				c.Set(fiber.HeaderContentType, ct)
				if strings.HasPrefix(name, "assets/") {
					c.Set(fiber.HeaderCacheControl, "public, max-age=31536000, immutable")
				} else {
					c.Set(fiber.HeaderCacheControl, "no-cache")
				}
				return c.Send(b)
			case strings.HasPrefix(name, "assets/") || !errors.Is(err, fs.ErrNotExist):
				// A missing asset is a 404, not the page: a stale tab must
				// not run index.html as a script.
				return c.Status(fiber.StatusNotFound).SendString("not found")
			}
		}
		c.Set(fiber.HeaderContentType, fiber.MIMETextHTMLCharsetUTF8)
		c.Set(fiber.HeaderCacheControl, "no-cache")
		return c.Send(index)
	})
}
