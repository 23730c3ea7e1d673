package api_test

import (
	"io"
	"io/fs"
	"net/http"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/api"
	"github.com/balletplanner/ballet/api/web"
)

// The browser app is served at / from the binary: its files with their
// types and caching, index.html for the app's own paths, and the api's
// paths left to the api.
func TestWebAppIsServed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	js, err := fs.Glob(web.FS(), "assets/*.js")
	if err != nil || len(js) == 0 {
		t.Fatalf("no script in the bundle: %v", err)
	}
	tests := []struct {
		name, path  string
		status      int
		contentType string
		cache       string
		page        bool // the app's index.html, with the page's headers
	}{
		{"root", "/", 200, "text/html", "no-cache", true},
		{"an app route", "/projects/WEB/sessions/abc", 200, "text/html", "no-cache", true},
		{"a hashed script", "/" + js[0], 200, "text/javascript", "public, max-age=31536000, immutable", false},
		{"a missing asset", "/assets/gone-1234.js", 404, "", "", false},
		{"an unknown api path", "/api/v1/nothing-here", 401, "application/json", "", false},
		{"health", "/healthz", 200, "application/json", "", false},
		{"the openapi document", "/api/v1/openapi.json", 200, "application/json", "", false},
		{"metrics, not on this port", "/metrics", 404, "application/json", "", false},
		{"under the dashboard's prefix, not mounted here", "/monitoring/queues", 404, "application/json", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res, err := http.Get("http://" + e.srv.Addr() + tt.path)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != tt.status {
				t.Fatalf("status %d, want %d", res.StatusCode, tt.status)
			}
			if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, tt.contentType) {
				t.Errorf("Content-Type %q, want %s", ct, tt.contentType)
			}
			if cc := res.Header.Get("Cache-Control"); tt.cache != "" && cc != tt.cache {
				t.Errorf("Cache-Control %q, want %q", cc, tt.cache)
			}
			csp := res.Header.Get("Content-Security-Policy")
			if tt.page {
				for _, want := range []string{"script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
					if !strings.Contains(csp, want) {
						t.Errorf("CSP %q lacks %s", csp, want)
					}
				}
				if res.Header.Get("X-Frame-Options") != "DENY" || res.Header.Get("Referrer-Policy") != "no-referrer" {
					t.Errorf("X-Frame-Options %q, Referrer-Policy %q", res.Header.Get("X-Frame-Options"), res.Header.Get("Referrer-Policy"))
				}
			}
			if res.Header.Get("X-Content-Type-Options") != "nosniff" && tt.status != 404 && tt.path != "/healthz" && !strings.HasPrefix(tt.path, "/api/") {
				t.Errorf("no nosniff")
			}
		})
	}
	// Only GET and HEAD fetch the page: another method is the api's 404.
	res, err := http.Post("http://"+e.srv.Addr()+"/projects", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 404 || !strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("POST /projects: %d %s, want the api's 404", res.StatusCode, res.Header.Get("Content-Type"))
	}
}

// The app's page says when the server runs in auth.mode local, so that the
// app, without a token, asks the api only then.
func TestWebAppPageTellsLocalMode(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		env   *env
		local bool
	}{
		{"token mode", newEnv(t), false},
		{"local mode", newAuthEnv(t, api.AuthConfig{Mode: api.AuthLocal}, nil), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res, err := http.Get("http://" + tt.env.srv.Addr() + "/projects/WEB/board")
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(res.Body)
			res.Body.Close()
			if err != nil || res.StatusCode != 200 {
				t.Fatalf("status %d, %v", res.StatusCode, err)
			}
			meta := `<meta name="ballet-auth" content="local" />`
			if got := strings.Contains(string(b), meta); got != tt.local {
				t.Fatalf("the page has %s: %v, want %v\n%s", meta, got, tt.local, b)
			}
			if !strings.Contains(string(b), `<div id="app">`) {
				t.Fatalf("not the app's page:\n%s", b)
			}
		})
	}
}
