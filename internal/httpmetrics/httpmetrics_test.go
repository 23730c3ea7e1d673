package httpmetrics

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestMethodLabel(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{"GET", "GET"}, {"POST", "POST"}, {"DELETE", "DELETE"}, {"get", "other"}, {"BREW", "other"}, {"", "other"},
	} {
		if got := methodLabel(tt.in); got != tt.want {
			t.Errorf("methodLabel(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestRegisterSharesOneRegistration: a second service of the process gets
// the families already registered, so every request counts in one series.
func TestRegisterSharesOneRegistration(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	api, err := Register(reg)
	if err != nil {
		t.Fatal(err)
	}
	gateway, err := Register(reg)
	if err != nil {
		t.Fatal(err)
	}
	api.Observe("api", "/x", "GET", 200, time.Now())
	gateway.Observe("gateway", "POST /v1/messages", "BREW", 401, time.Now())
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, mf := range families {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			got[mf.GetName()] = append(got[mf.GetName()], strings.Join(labels, ","))
		}
	}
	want := map[string][]string{
		"ballet_http_requests_total": {"method=GET,route=/x,service=api,status=200",
			"method=other,route=POST /v1/messages,service=gateway,status=401"},
		"ballet_http_request_duration_seconds": {"method=GET,route=/x,service=api",
			"method=other,route=POST /v1/messages,service=gateway"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("series:\n%v\nwant\n%v", got, want)
	}
	if _, err := Register(failing{reg}); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Error("a registry that refuses: no error")
	}
}

// failing refuses every registration with an error other than
// AlreadyRegistered.
type failing struct{ prometheus.Registerer }

func (failing) Register(prometheus.Collector) error { return errors.New("refused") }
