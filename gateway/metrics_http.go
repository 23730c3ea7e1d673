package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// unmatchedRoute is the route label of a request no route pattern took.
const unmatchedRoute = "unmatched"

// httpMetrics are the HTTP request series the api and the gateway share in
// one process: the service label tells them apart.
type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	refusals *prometheus.CounterVec
}

// refusalReasons are the reason label values of ballet_llm_refusals_total.
var refusalReasons = []string{"unauthenticated", "forbidden", "no_credential", "upstream_not_allowed", "budget",
	"rate_limit", "upstream"}

func newHTTPMetrics(reg prometheus.Registerer) (*httpMetrics, error) {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ballet_http_requests_total",
			Help: "HTTP requests answered, by service (api, gateway), route pattern (\"unmatched\" when none), method and status."},
			[]string{"service", "route", "method", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ballet_http_request_duration_seconds",
			Help:    "HTTP request duration until the handler returned (a stream's whole length), by service, route pattern and method.",
			Buckets: prometheus.DefBuckets}, []string{"service", "route", "method"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ballet_llm_refusals_total",
			Help: "Gateway answers 401, 403 and 429, by reason (unauthenticated, forbidden, no_credential, upstream_not_allowed, budget, rate_limit, upstream: an upstream's own refusal passed on)."},
			[]string{"reason"}),
	}
	var err error
	// The api registers the same two HTTP families in `ballet serve`: share them.
	if m.requests, err = registerShared(reg, m.requests); err != nil {
		return nil, err
	}
	if m.duration, err = registerShared(reg, m.duration); err != nil {
		return nil, err
	}
	if err := reg.Register(m.refusals); err != nil {
		return nil, fmt.Errorf("gateway: register metrics: %w", err)
	}
	for _, r := range refusalReasons {
		m.refusals.WithLabelValues(r)
	}
	return m, nil
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
		return c, fmt.Errorf("gateway: register metrics: %w", err)
	}
	return c, nil
}

// instrument counts and times every request next serves, labelled with the
// pattern of mux that routes it.
func (m *httpMetrics) instrument(mux *http.ServeMux, next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		_, route := mux.Handler(r)
		if route == "" || route == "/" {
			route = unmatchedRoute
		}
		rec := &statusRecorder{ResponseWriter: w}
		next(rec, r)
		status := rec.status
		if status == 0 {
			status = http.StatusOK
		}
		method := methodLabel(r.Method)
		m.requests.WithLabelValues("gateway", route, method, strconv.Itoa(status)).Inc()
		m.duration.WithLabelValues("gateway", route, method).Observe(time.Since(start).Seconds())
		if status == http.StatusUnauthorized || status == http.StatusForbidden || status == http.StatusTooManyRequests {
			m.refusals.WithLabelValues(refusalReason(status, rec.errBody.Bytes())).Inc()
		}
	})
}

// methodLabel is an HTTP method as a label: one of the standard ones, else
// "other", so that the label stays bounded.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete,
		http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "other"
}

// refusalReason names a 401, 403 or 429 answer from its error body.
func refusalReason(status int, body []byte) string {
	switch {
	case status == http.StatusUnauthorized:
		return "unauthenticated"
	case bytes.Contains(body, []byte("upstream ")) && !bytes.Contains(body, []byte("is not allowed")):
		return "upstream"
	case bytes.Contains(body, []byte("budget")):
		return "budget"
	case status == http.StatusTooManyRequests:
		return "rate_limit"
	case bytes.Contains(body, []byte("no provider credential")) || bytes.Contains(body, []byte("no_credential")):
		return "no_credential"
	case bytes.Contains(body, []byte("not allowed")):
		return "upstream_not_allowed"
	}
	return "forbidden"
}

// statusRecorder keeps the status written and, for a refusal, the start of
// its error body.
type statusRecorder struct {
	http.ResponseWriter
	status  int
	errBody bytes.Buffer
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	if r.status >= 400 && r.errBody.Len() < 2048 {
		r.errBody.Write(b[:min(len(b), 2048-r.errBody.Len())])
	}
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection: a stream's
// flushes go through it.
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
