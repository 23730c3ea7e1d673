// Package httpmetrics holds the HTTP request series that the api and the
// gateway both export: ballet_http_requests_total and
// ballet_http_request_duration_seconds, told apart by their service label
// and registered once however many services one process runs.
package httpmetrics

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Unmatched is the route label of a request no route pattern took.
const Unmatched = "unmatched"

// Families are the two HTTP request series of one process.
type Families struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// Register registers the families on reg, or returns those another
// service of the process registered already.
func Register(reg prometheus.Registerer) (*Families, error) {
	f := &Families{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ballet_http_requests_total",
			Help: "HTTP requests answered, by service (api, gateway), route pattern (\"unmatched\" when none), method and status."},
			[]string{"service", "route", "method", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ballet_http_request_duration_seconds",
			Help:    "HTTP request duration until the handler returned (a stream's whole length), by service, route pattern and method.",
			Buckets: prometheus.DefBuckets}, []string{"service", "route", "method"}),
	}
	var err error
	if f.requests, err = shared(reg, f.requests); err != nil {
		return nil, err
	}
	if f.duration, err = shared(reg, f.duration); err != nil {
		return nil, err
	}
	return f, nil
}

// Observe counts one answered request of service since start.
func (f *Families) Observe(service, route, method string, status int, start time.Time) {
	method = methodLabel(method)
	f.requests.WithLabelValues(service, route, method, strconv.Itoa(status)).Inc()
	f.duration.WithLabelValues(service, route, method).Observe(time.Since(start).Seconds())
}

// methodLabel is an HTTP method as a label: one of the standard ones, else
// "other", so that the label stays bounded (and, returning a constant, owns
// its bytes where fasthttp reuses the request's).
func methodLabel(m string) string {
	for _, std := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace} {
		if m == std {
			return std
		}
	}
	return "other"
}

// shared registers c, or returns the identical collector registered already.
func shared[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	if err != nil {
		return c, fmt.Errorf("httpmetrics: register: %w", err)
	}
	return c, nil
}
