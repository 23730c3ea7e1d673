package api

import (
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/balletplanner/ballet/internal/requestid"
)

// probePaths are logged at debug: probes ask every few seconds.
var probePaths = map[string]bool{"/healthz": true, "/readyz": true}

// accessLog writes one line per request once it is answered (a websocket
// upgrade once, at the upgrade) and gives the request its id: the caller's
// X-Request-Id when well formed (requestid.Valid), else a new one. The id
// is echoed in X-Request-Id, logged as request_id, and carried by the
// request's context (requestid.With): a planner send puts it in the turn
// task, whose worker logs it and sends it on to the gateway. The line's
// remote is the client address (remoteIP: X-Forwarded-For only from
// server.trusted_proxies).
func (s *Server) accessLog(c *fiber.Ctx) error {
	start := time.Now()
	// A copy: fasthttp reuses the request's bytes, and the context may
	// outlive the request (an event stream, a socket).
	id := strings.Clone(c.Get(requestid.Header))
	if !requestid.Valid(id) {
		id = newRequestID()
	}
	c.Set(requestid.Header, id)
	c.SetUserContext(requestid.With(c.UserContext(), id))
	remote := s.remote(c) // before the handlers: a /rpc socket copies it at the upgrade
	if err := c.Next(); err != nil {
		if herr := c.App().ErrorHandler(c, err); herr != nil {
			_ = c.SendStatus(fiber.StatusInternalServerError)
		}
	}
	level := slog.LevelInfo
	if probePaths[c.Path()] {
		level = slog.LevelDebug
	}
	ctx := c.UserContext()
	if !s.log.Enabled(ctx, level) {
		return nil
	}
	res := c.Response()
	attrs := []slog.Attr{
		slog.String("method", c.Method()), slog.String("route", c.Route().Path), slog.String("path", c.Path()),
		slog.Int("status", res.StatusCode()), slog.Float64("took_ms", millis(time.Since(start))),
	}
	if res.IsBodyStream() {
		// An event stream is written after this line: it has no length yet,
		// and took_ms is the time until it began.
		attrs = append(attrs, slog.Bool("streamed", true))
	} else {
		attrs = append(attrs, slog.Int("bytes", len(res.Body())))
	}
	attrs = append(attrs, slog.String("remote", remote), slog.String("request_id", id))
	if p := principal(c); p != nil {
		attrs = append(attrs, slog.String("subject", p.Subject))
	}
	s.log.LogAttrs(ctx, level, "request", attrs...)
	return nil
}

func newRequestID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return "req_" + hex.EncodeToString(b)
}

// millis is d in milliseconds, to the microsecond, as every log line has it.
func millis(d time.Duration) float64 {
	return math.Round(float64(d)/float64(time.Microsecond)) / 1000
}
