package api_test

import (
	"net/http"
	"testing"
)

// TestNoMetricsOnThePublicPort: the api's port does not serve the metrics,
// which name every organization and project; the process serves them on
// its internal metrics listener instead.
func TestNoMetricsOnThePublicPort(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, who := range []string{"", "engineer", "platform"} {
		r := e.do("GET", "/metrics", who, nil).expect(t, http.StatusNotFound)
		if r.errorCode() != "not_found" {
			t.Fatalf("GET /metrics as %q: body %s", who, r.Raw)
		}
	}
}
