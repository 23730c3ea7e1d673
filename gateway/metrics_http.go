package gateway

import (
	"bytes"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/balletplanner/ballet/internal/httpmetrics"
)

// httpMetrics are the HTTP request series the api and the gateway share in
// one process: the service label tells them apart.
type httpMetrics struct {
	families *httpmetrics.Families
	refusals *prometheus.CounterVec
}

// refusalReasons are the reason label values of ballet_llm_refusals_total.
var refusalReasons = []string{"unauthenticated", "forbidden", "no_credential", "upstream_not_allowed", "budget",
	"rate_limit", "upstream"}

func newHTTPMetrics(reg prometheus.Registerer) (*httpMetrics, error) {
	m := &httpMetrics{
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ballet_llm_refusals_total",
			Help: "Gateway answers 401, 403 and 429, by reason (unauthenticated, forbidden, no_credential, upstream_not_allowed, budget, rate_limit, upstream: an upstream's own refusal passed on)."},
			[]string{"reason"}),
	}
	var err error
	// The api registers the same two HTTP families in `ballet serve`: share them.
	if m.families, err = httpmetrics.Register(reg); err != nil {
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

// instrument counts and times every request serve answers, labelled with
// the route serve returns: the pattern of the mux that routed it.
func (m *httpMetrics) instrument(serve func(w http.ResponseWriter, r *http.Request) (route string)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		route := serve(rec, r)
		if route == "" || route == "/" {
			route = httpmetrics.Unmatched
		}
		status := rec.status
		if status == 0 {
			status = http.StatusOK
		}
		m.families.Observe("gateway", route, r.Method, status, start)
		if status == http.StatusUnauthorized || status == http.StatusForbidden || status == http.StatusTooManyRequests {
			m.refusals.WithLabelValues(refusalReason(status, rec.errBody.Bytes())).Inc()
		}
	})
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
