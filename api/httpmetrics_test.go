package api_test

import (
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/balletplanner/ballet/api"
	"github.com/balletplanner/ballet/store/storetest"
	"github.com/balletplanner/ballet/tasks/taskstest"
)

// TestHTTPRequestMetrics: each request is counted under its route pattern
// with the status sent (an error's too), never its raw path; a path no
// route takes is "unmatched".
func TestHTTPRequestMetrics(t *testing.T) {
	t.Parallel()
	rdb, _ := taskstest.New(t)
	reg := prometheus.NewRegistry()
	srv, err := api.New(api.DefaultConfig(), api.DefaultAuthConfig(), api.Deps{DB: storetest.New(t), Redis: rdb, Registry: reg, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		method, path string
		route        string
		status       int
	}{
		{"GET", "/healthz", "/healthz", 200},
		{"GET", "/api/v1/projects/WEB/items/WEB-1", "/api/v1", 401}, // refused by the group's authentication
		{"GET", "/api/v1/no/such/route", "/api/v1", 401},
		{"POST", "/no/such/route", "unmatched", 404},
		{"DELETE", "/healthz", "unmatched", 404},
	}
	for _, tt := range tests {
		res, err := srv.App().Test(httptest.NewRequest(tt.method, tt.path, nil), -1)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != tt.status {
			t.Errorf("%s %s: %d, want %d", tt.method, tt.path, res.StatusCode, tt.status)
		}
	}
	for _, tt := range tests {
		method := tt.method
		c, err := testutilCounter(reg, "api", tt.route, method, strconv.Itoa(tt.status))
		if err != nil || c < 1 {
			t.Errorf("%s %s: ballet_http_requests_total{route=%q,method=%q,status=\"%d\"} = %v (%v)", tt.method, tt.path,
				tt.route, method, tt.status, c, err)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		if mf.GetName() == "ballet_http_requests_total" {
			n = len(mf.GetMetric())
		}
	}
	if n != 4 {
		t.Errorf("%d request series, want 4 (one per route, method and status)", n)
	}
}

// testutilCounter is one ballet_http_requests_total sample of reg.
func testutilCounter(reg *prometheus.Registry, labels ...string) (float64, error) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, err
	}
	names := []string{"service", "route", "method", "status"}
	for _, mf := range mfs {
		if mf.GetName() != "ballet_http_requests_total" {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for i, n := range names {
				if got[n] != labels[i] {
					continue next
				}
			}
			return m.GetCounter().GetValue(), nil
		}
	}
	return 0, nil
}
