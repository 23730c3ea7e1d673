package api

import (
	"fmt"
	"mime"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"

	"github.com/balletplanner/ballet/store"
)

// checkInput refuses, before authentication or any handler runs, what no
// route can take: a write whose body is not declared as JSON, and a NUL
// character in the path or the query, which Postgres text cannot hold.
func (s *Server) checkInput(c *fiber.Ctx) error {
	if err := checkContentType(c); err != nil {
		return err
	}
	if err := s.checkURL(c); err != nil {
		return err
	}
	return c.Next()
}

// checkContentType requires Content-Type: application/json (with charset
// utf-8, if one is given) on a POST, PUT or PATCH. A write that sends no
// body may leave the header out; one that names another type is refused
// even then, as that is what a form on another site sends.
func checkContentType(c *fiber.Ctx) error {
	switch c.Method() {
	case fiber.MethodPost, fiber.MethodPut, fiber.MethodPatch:
	default:
		return nil
	}
	header := c.Get(fiber.HeaderContentType)
	if strings.TrimSpace(header) == "" {
		if len(c.Body()) == 0 {
			return nil
		}
		return unsupportedMedia("Content-Type: must be application/json, got none")
	}
	mediaType, params, err := mime.ParseMediaType(header)
	if err != nil {
		return unsupportedMedia("Content-Type: must be application/json, got %q", header)
	}
	if mediaType != fiber.MIMEApplicationJSON {
		return unsupportedMedia("Content-Type: must be application/json, got %q", mediaType)
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return unsupportedMedia("Content-Type: charset must be utf-8, got %q", cs)
	}
	return nil
}

// unsupportedMedia is a 415 reply; handleError gives it the code
// invalid_argument.
func unsupportedMedia(format string, args ...any) error {
	return fiber.NewError(fiber.StatusUnsupportedMediaType, fmt.Sprintf(format, args...))
}

// checkURL refuses a NUL character (%00) in a path or query parameter,
// naming the parameter.
func (s *Server) checkURL(c *fiber.Ctx) error {
	path := c.Path()
	if strings.Contains(path, "%00") || strings.ContainsRune(path, 0) {
		return store.Errorf(store.CodeInvalid, "path parameter %q: must not contain NUL characters", s.badSegment(c.Method(), path, hasNUL))
	}
	if !utf8.ValidString(path) || !utf8.ValidString(unescaped(path)) {
		return store.Errorf(store.CodeInvalid, "path parameter %q: must be valid UTF-8", s.badSegment(c.Method(), path, notUTF8))
	}
	var bad, why string
	c.Context().QueryArgs().VisitAll(func(k, v []byte) {
		switch {
		case bad != "":
		case strings.ContainsRune(string(k), 0) || strings.ContainsRune(string(v), 0):
			bad, why = strconv.QuoteToASCII(string(k)), "must not contain NUL characters"
		case !utf8.Valid(k) || !utf8.Valid(v):
			bad, why = strconv.QuoteToASCII(string(k)), "must be valid UTF-8"
		}
	})
	if bad != "" {
		return store.Errorf(store.CodeInvalid, "query parameter %s: %s", bad, why)
	}
	return nil
}

// unescaped is a path with its escapes decoded, or as it is when they are
// not well formed.
func unescaped(path string) string {
	if u, err := url.PathUnescape(path); err == nil {
		return u
	}
	return path
}

// notUTF8 reports whether a raw path segment is not UTF-8, escaped or not.
func notUTF8(seg string) bool { return !utf8.ValidString(unescaped(seg)) }

// badSegment names the route parameter whose segment of path is bad, by
// matching path against the registered routes of method; it is "path"
// when the bad part is in no parameter.
func (s *Server) badSegment(method, path string, bad func(seg string) bool) string {
	segs := strings.Split(path, "/")
	for _, r := range s.app.GetRoutes(true) {
		if r.Method != method || len(r.Params) == 0 {
			continue
		}
		parts := strings.Split(r.Path, "/")
		if len(parts) != len(segs) {
			continue
		}
		name, match := "", true
		for i, p := range parts {
			if strings.HasPrefix(p, ":") {
				if name == "" && bad(segs[i]) {
					name = strings.TrimPrefix(p, ":")
				}
				continue
			}
			if !strings.EqualFold(p, segs[i]) {
				match = false
				break
			}
		}
		if match && name != "" {
			return name
		}
	}
	return "path"
}

// hasNUL reports whether a raw path segment holds a NUL, escaped or not.
func hasNUL(seg string) bool { return strings.ContainsRune(unescaped(seg), 0) }
