package api

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/prometheus/client_golang/prometheus"
)

// unmatchedRoute is the route label of a request no route pattern took.
const unmatchedRoute = "unmatched"

// useHTTPMetrics counts and times every request by route pattern, on reg
// (nothing without one). The gateway registers the same two families in
// `ballet serve`: the service label tells them apart, and one registration
// is shared.
func (s *Server) useHTTPMetrics(reg *prometheus.Registry) error {
	if reg == nil {
		return nil
	}
	requests, err := registerShared(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ballet_http_requests_total",
		Help: "HTTP requests answered, by service (api, gateway), route pattern (\"unmatched\" when none), method and status."},
		[]string{"service", "route", "method", "status"}))
	if err != nil {
		return err
	}
	duration, err := registerShared(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ballet_http_request_duration_seconds",
		Help:    "HTTP request duration until the handler returned (a stream's whole length), by service, route pattern and method.",
		Buckets: prometheus.DefBuckets}, []string{"service", "route", "method"}))
	if err != nil {
		return err
	}
	var (
		once   sync.Once
		routes map[string]bool // "METHOD /pattern" of every route but middleware
	)
	s.app.Use(func(c *fiber.Ctx) error {
		start := time.Now()
		once.Do(func() {
			routes = map[string]bool{}
			for _, r := range s.app.GetRoutes(true) {
				routes[r.Method+" "+r.Path] = true
			}
		})
		method := methodLabel(c.Method())
		if err := c.Next(); err != nil {
			// Answer the error here, so that the status counted is the one sent.
			if err := s.handleError(c, err); err != nil {
				return err
			}
		}
		status := c.Response().StatusCode()
		route := unmatchedRoute
		if r := c.Route(); routes[r.Method+" "+r.Path] || status != fiber.StatusNotFound {
			// A middleware that answered itself (the web app at "/", the
			// dashboard) is labelled with its prefix.
			route = r.Path
		}
		requests.WithLabelValues("api", route, method, strconv.Itoa(status)).Inc()
		duration.WithLabelValues("api", route, method).Observe(time.Since(start).Seconds())
		return nil
	})
	return nil
}

// methodLabel is an HTTP method as a label: one of the standard ones, else
// "other", so that the label stays bounded and owns its bytes (fasthttp
// reuses the request's).
func methodLabel(m string) string {
	for _, std := range []string{fiber.MethodGet, fiber.MethodHead, fiber.MethodPost, fiber.MethodPut, fiber.MethodPatch,
		fiber.MethodDelete, fiber.MethodOptions, fiber.MethodConnect, fiber.MethodTrace} {
		if m == std {
			return std
		}
	}
	return "other"
}

// registerShared registers c, or returns the identical collector another
// component of the process registered already.
func registerShared[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	if err != nil {
		return c, fmt.Errorf("api: register metrics: %w", err)
	}
	return c, nil
}
