package api_test

import (
	"crypto/sha256"
	"encoding/base64"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/api"
	"github.com/balletplanner/ballet/tasks/taskstest"
)

// newMonitoringEnv is newEnv's api with the asynq dashboard mounted.
func newMonitoringEnv(t *testing.T) *env {
	t.Helper()
	e := newEnv(t)
	conn, err := taskstest.Config(t).AsynqConnOpt()
	if err != nil {
		t.Fatal(err)
	}
	mon := api.NewMonitoring(conn)
	t.Cleanup(func() { _ = mon.Close() })
	e.restart(t, func(_ *testing.T, d *api.Deps, _ string) { d.Monitoring = mon })
	return e
}

// browserGet is a GET that follows no redirect, with an optional cookie.
func browserGet(t *testing.T, e *env, path, cookie string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("GET", "http://"+e.srv.Addr()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cookie != "" {
		req.Header.Set("Cookie", cookie)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, string(body)
}

func TestMonitoringSignIn(t *testing.T) {
	t.Parallel()
	e := newMonitoringEnv(t)
	tests := []struct {
		name     string
		path     string
		status   int
		location string // "" for no redirect
		cookie   bool
	}{
		{"invalid token sets no cookie", "/monitoring/?token=blt_nope&tab=x", 401, "", false},
		{"not a token at all", "/monitoring/queues?token=hello", 401, "", false},
		{"valid token keeps the other parameters", "/monitoring/queues/default?token=" + e.tokens["platform"] + "&tab=retry&q=a+b",
			303, "/monitoring/queues/default?q=a+b&tab=retry", true},
		{"valid token alone", "/monitoring/?token=" + e.tokens["platform"], 303, "/monitoring/", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, body := browserGet(t, e, tt.path, "")
			if res.StatusCode != tt.status {
				t.Fatalf("status %d, want %d; body %s", res.StatusCode, tt.status, body)
			}
			if got := res.Header.Get("Location"); got != tt.location {
				t.Errorf("Location %q, want %q", got, tt.location)
			}
			set := res.Header.Get("Set-Cookie")
			if tt.cookie != strings.Contains(set, "ballet_token=") {
				t.Errorf("Set-Cookie %q, want a cookie: %v", set, tt.cookie)
			}
			if tt.cookie && (!strings.Contains(set, "HttpOnly") || !strings.Contains(set, "SameSite=Strict") || !strings.Contains(set, "max-age=43200")) {
				t.Errorf("Set-Cookie %q, want HttpOnly, SameSite=Strict and a 12 h max-age", set)
			}
			if tt.cookie {
				// The cookie is a session token of its own, not the one given,
				// and it opens the dashboard.
				value, _, _ := strings.Cut(strings.TrimPrefix(set, "ballet_token="), ";")
				if value == e.tokens["platform"] || !strings.HasPrefix(value, "blt_") {
					t.Fatalf("the cookie holds %q, want a token of its own", value)
				}
				if res, body := browserGet(t, e, "/monitoring/", "ballet_token="+value); res.StatusCode != 200 {
					t.Fatalf("the cookie's token: %d %s", res.StatusCode, body)
				}
			}
		})
	}
}

func TestMonitoringPageAndAssets(t *testing.T) {
	t.Parallel()
	e := newMonitoringEnv(t)
	cookie := "ballet_token=" + e.tokens["platform"]
	tests := []struct {
		name   string
		path   string
		cookie string
		status int
		html   bool
	}{
		{"index with the cookie", "/monitoring/", cookie, 200, true},
		{"a page of the app with the cookie", "/monitoring/queues/default", cookie, 200, true},
		{"index without the cookie", "/monitoring/", "", 401, false},
		{"its api without the cookie", "/monitoring/api/queues", "", 401, false},
		{"its api with the cookie", "/monitoring/api/queues", cookie, 200, false},
		{"manifest without the cookie", "/monitoring/manifest.json", "", 200, false},
		{"manifest with the cookie", "/monitoring/manifest.json", cookie, 200, false},
		{"favicon", "/monitoring/favicon.ico", "", 200, false},
		{"icon", "/monitoring/favicon-32x32.png", "", 200, false},
		{"no way out of the assets", "/monitoring/static/js/../../api/queues", "", 401, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, body := browserGet(t, e, tt.path, tt.cookie)
			if res.StatusCode != tt.status {
				t.Fatalf("status %d, want %d; body %.200s", res.StatusCode, tt.status, body)
			}
			if got := res.Header.Get("X-Content-Type-Options"); got != "nosniff" {
				t.Errorf("X-Content-Type-Options %q", got)
			}
			if !tt.html {
				return
			}
			csp := res.Header.Get("Content-Security-Policy")
			for _, want := range []string{"frame-ancestors 'none'", "default-src 'self'", "object-src 'none'"} {
				if !strings.Contains(csp, want) {
					t.Errorf("Content-Security-Policy %q lacks %q", csp, want)
				}
			}
			if res.Header.Get("X-Frame-Options") != "DENY" || res.Header.Get("Referrer-Policy") != "no-referrer" {
				t.Errorf("X-Frame-Options %q, Referrer-Policy %q", res.Header.Get("X-Frame-Options"), res.Header.Get("Referrer-Policy"))
			}
			// The dashboard runs under the policy: each inline script is
			// allowed by its hash, each script file comes from this origin.
			inline := regexp.MustCompile(`(?s)<script>(.*?)</script>`).FindAllStringSubmatch(body, -1)
			if len(inline) == 0 {
				t.Fatalf("no inline script in the index: %.300s", body)
			}
			for _, m := range inline {
				sum := sha256.Sum256([]byte(m[1]))
				if h := "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"; !strings.Contains(csp, h) {
					t.Errorf("inline script %.60q not allowed by %q", m[1], csp)
				}
			}
			for _, m := range regexp.MustCompile(`<script src="([^"]+)"`).FindAllStringSubmatch(body, -1) {
				if res, js := browserGet(t, e, m[1], ""); res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "application/javascript") {
					t.Errorf("script %s: %d %q (%d bytes)", m[1], res.StatusCode, res.Header.Get("Content-Type"), len(js))
				}
			}
		})
	}
}

// TestMonitoringCookieSecureBehindTLSProxy: the dashboard's cookie is
// Secure when the browser reached us over https through a TLS-terminating
// proxy named in server.trusted_proxies (its X-Forwarded-Proto believed),
// and only then: a peer that is not trusted cannot claim https, and plain
// http gets a cookie the browser may send back over http.
func TestMonitoringCookieSecureBehindTLSProxy(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	conn, err := taskstest.Config(t).AsynqConnOpt()
	if err != nil {
		t.Fatal(err)
	}
	mon := api.NewMonitoring(conn)
	t.Cleanup(func() { _ = mon.Close() })
	e.restartWith(t, func(c *api.Config) { c.TrustedProxies = []string{"127.0.0.2/32"} },
		func(_ *testing.T, d *api.Deps, _ string) { d.Monitoring = mon })
	tests := []struct {
		name   string
		from   string // the peer; 127.0.0.2 is the trusted proxy
		proto  string // X-Forwarded-Proto; "" sends none
		secure bool
	}{
		{"https through the trusted proxy", "127.0.0.2", "https", true},
		{"http through the trusted proxy", "127.0.0.2", "http", false},
		{"the trusted proxy says nothing", "127.0.0.2", "", false},
		{"an untrusted peer claims https", "127.0.0.1", "https", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req, err := http.NewRequest("GET", "http://"+e.srv.Addr()+"/monitoring/?token="+e.tokens["platform"], nil)
			if err != nil {
				t.Fatal(err)
			}
			if tt.proto != "" {
				req.Header.Set("X-Forwarded-Proto", tt.proto)
			}
			c := clientFrom(tt.from)
			c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
			res, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = res.Body.Close()
			set := res.Header.Get("Set-Cookie")
			if res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(set, "ballet_token=") {
				t.Fatalf("status %d, Set-Cookie %q: want 303 and the session cookie", res.StatusCode, set)
			}
			if got := strings.Contains(strings.ToLower(set), "; secure"); got != tt.secure {
				t.Errorf("Set-Cookie %q: Secure %v, want %v", set, got, tt.secure)
			}
		})
	}
}
