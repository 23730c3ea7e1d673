package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestHealthAndReady(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.do("GET", "/healthz", "", nil).expect(t, http.StatusOK)
	r := e.do("GET", "/readyz", "", nil).expect(t, http.StatusOK)
	if r.Body["status"] != "ok" {
		t.Fatalf("readyz body %s", r.Raw)
	}
}

func TestTokens(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tests := []struct {
		name    string
		who     string
		body    any
		status  int
		code    string
		message string
	}{
		{"no token", "", map[string]any{}, 401, "unauthenticated", "missing bearer token"},
		{"create", "viewer", map[string]any{"name": "ci"}, 201, "", ""},
		{"unknown field", "viewer", `{"nmae":"ci"}`, 400, "invalid_argument", `unknown field "nmae"`},
		{"wrong type", "viewer", `{"name":5}`, 400, "invalid_argument", "field name: must be a string"},
		{"bad ttl", "viewer", map[string]any{"ttl": "soon"}, 400, "invalid_argument", "ttl"},
		{"ttl over the maximum", "viewer", map[string]any{"ttl": "87600h"}, 400, "invalid_argument", "ttl: at most 2160h0m0s (auth.token_max_ttl), got 87600h0m0s"},
		{"body too large", "viewer", `{"name":"` + strings.Repeat("x", 1<<20) + `"}`, 413, "invalid_argument", "exceeds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do("POST", "/api/v1/tokens", tt.who, tt.body).expect(t, tt.status)
			if tt.code != "" && r.errorCode() != tt.code {
				t.Errorf("error %q, want %q", r.errorCode(), tt.code)
			}
			if !strings.Contains(r.message(), tt.message) {
				t.Errorf("message %q does not contain %q", r.message(), tt.message)
			}
		})
	}
	// Without a ttl a token lives auth.token_max_ttl, not for ever.
	r := e.do("POST", "/api/v1/tokens", "viewer", map[string]any{"name": "default"}).expect(t, 201)
	exp, err := time.Parse(time.RFC3339Nano, fmt.Sprint(r.Body["expires_at"]))
	if err != nil || exp.Before(time.Now().Add(89*24*time.Hour)) || exp.After(time.Now().Add(91*24*time.Hour)) {
		t.Fatalf("expires_at %v (%v), want in 90 days", r.Body["expires_at"], err)
	}
	// A created token authenticates, and stops once revoked.
	r = e.do("POST", "/api/v1/tokens", "viewer", map[string]any{"name": "mine"}).expect(t, 201)
	e.tokens["mine"] = r.Body["token"].(string)
	e.do("GET", "/api/v1/tokens", "mine", nil).expect(t, 200)
	e.do("DELETE", "/api/v1/tokens/"+r.Body["id"].(string), "mine", nil).expect(t, 204)
	e.do("GET", "/api/v1/tokens", "mine", nil).expect(t, 401)
}
