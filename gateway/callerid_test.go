package gateway

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/internal/requestid"
)

// TestCallerRequestID: the caller's X-Request-Id is kept for the llm call
// log line when well formed, else dropped (the gateway's own id remains).
// The whole path, from an api send through a worker's turn to this line, is
// worker.TestRequestIDReachesGateway.
func TestCallerRequestID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, header, want string
	}{
		{"kept", "req_0123abcd", "req_0123abcd"},
		{"none", "", ""},
		{"too long", strings.Repeat("x", requestid.MaxLen+1), ""},
		{"a control character", "a\tb", ""},
		{"not ascii", "idé", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/v1/messages", nil)
			if tt.header != "" {
				r.Header[requestid.Header] = []string{tt.header}
			}
			if got := callerRequestID(r.Header); got != tt.want {
				t.Errorf("caller request id %q, want %q", got, tt.want)
			}
		})
	}
}
