package api_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/api"
)

// corsRequest sends method to path with the given headers and returns the
// status, headers and body.
func corsRequest(t *testing.T, e *rpcEnv, method, path string, header ...string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+e.srv.Addr()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, string(body)
}

// CORS: a preflight from a listed origin is answered before authentication,
// answers to it carry Access-Control-Allow-Origin (errors too, so a browser
// can read them), and an origin not listed gets no such header; with no
// origin configured, nothing changes (a preflight needs a token, as before).
func TestCORS(t *testing.T) {
	t.Parallel()
	const app = "https://app.example.com"
	e := newRPCEnv(t, func(c *api.Config) { c.CORSAllowedOrigins = []string{app, "https://*.tools.example.com"} })
	none := newRPCEnv(t, nil)
	send := "/api/v1/planner/sessions/" + e.session + "/messages"
	preflight := []string{"Origin", app, "Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "authorization,content-type"}
	tests := []struct {
		name   string
		env    *rpcEnv
		method string
		header []string
		status int
		// allow is the Access-Control-Allow-Origin wanted ("" for none).
		allow string
		more  map[string]string // other headers wanted, by substring
	}{
		{"preflight from a listed origin", e, "OPTIONS", preflight, 204, app, map[string]string{
			"Access-Control-Allow-Methods": "POST", "Access-Control-Allow-Headers": "Authorization", "Access-Control-Max-Age": "600"}},
		{"preflight from a listed subdomain", e, "OPTIONS", []string{"Origin", "https://ci.tools.example.com", "Access-Control-Request-Method", "GET"},
			204, "https://ci.tools.example.com", nil},
		{"preflight from another origin", e, "OPTIONS", []string{"Origin", "https://evil.example.net", "Access-Control-Request-Method", "POST"}, 204, "", nil},
		{"a call from a listed origin", e, "GET", []string{"Origin", app, "Authorization", "Bearer " + e.tokens["viewer"]}, 200, app,
			map[string]string{"Access-Control-Expose-Headers": "X-Request-Id"}},
		{"an error to a listed origin", e, "GET", []string{"Origin", app}, 401, app, nil},
		{"a call from another origin", e, "GET", []string{"Origin", "https://evil.example.net", "Authorization", "Bearer " + e.tokens["viewer"]}, 200, "", nil},
		{"no origins configured: a preflight needs a token", none, "OPTIONS", preflight, 401, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := "/api/v1/planner/sessions/" + tt.env.session
			if tt.method == "OPTIONS" {
				path = send
			}
			status, h, body := corsRequest(t, tt.env, tt.method, path, tt.header...)
			if status != tt.status || h.Get("Access-Control-Allow-Origin") != tt.allow {
				t.Fatalf("%d, Access-Control-Allow-Origin %q; want %d, %q (%s)", status, h.Get("Access-Control-Allow-Origin"), tt.status, tt.allow, body)
			}
			for k, v := range tt.more {
				if !strings.Contains(strings.ToLower(h.Get(k)), strings.ToLower(v)) {
					t.Fatalf("%s %q lacks %q", k, h.Get(k), v)
				}
			}
		})
	}
}

func TestCORSConfigRefusals(t *testing.T) {
	t.Parallel()
	for _, o := range []string{"app.example.com", "https://app.example.com/app", "ftp://app.example.com", "https://app.example.com?x=1"} {
		cfg := api.DefaultConfig()
		cfg.CORSAllowedOrigins = []string{o}
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), "server.cors_allowed_origins") || !strings.Contains(err.Error(), o) {
			t.Fatalf("origin %q: %v", o, err)
		}
	}
	cfg := api.DefaultConfig()
	cfg.CORSAllowedOrigins = []string{"*", "http://localhost:5173", "https://*.example.com"}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
}
