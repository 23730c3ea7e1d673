package api_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/api"
)

// TestOpenAPIDocumentsTraceHeaders checks that the operations that continue
// a client's W3C trace context (restTrace) declare its two headers,
// optional, and that no other operation claims to.
func TestOpenAPIDocumentsTraceHeaders(t *testing.T) {
	t.Parallel()
	doc, ops := parseOpenAPI(t, api.OpenAPI())
	honoured := []string{"POST /planner/sessions/{session}/messages", "POST /planner/sessions/{session}/cancel"}
	for key, op := range ops {
		var headers []string
		for _, p := range op.Parameters {
			if name, ok := strings.CutPrefix(p.Ref, "#/components/parameters/"); ok {
				p = doc.Comps.Parameters[name]
			}
			if p.In == "header" && (p.Name == "traceparent" || p.Name == "tracestate") {
				if p.Required {
					t.Errorf("%s: header %s must be optional", key, p.Name)
				}
				headers = append(headers, p.Name)
			}
		}
		slices.Sort(headers)
		want := []string(nil)
		if slices.Contains(honoured, key) {
			want = []string{"traceparent", "tracestate"}
		}
		if !slices.Equal(headers, want) {
			t.Errorf("%s: trace headers %v, want %v", key, headers, want)
		}
	}
}
