package api_test

import (
	"strings"
	"testing"

	"github.com/balletplanner/ballet/api"
	"github.com/balletplanner/ballet/gateway"
)

// withUpstreams gives the api the gateway's upstream allow list.
func withUpstreams(u api.UpstreamPolicy) depsOption {
	return func(_ *testing.T, d *api.Deps, _ string) { d.Upstreams = u }
}

func TestCredentialBaseURLMustBeAnAllowedUpstream(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := gateway.DefaultConfig()
	cfg.AllowedUpstreams = append(cfg.AllowedUpstreams, "http://10.0.0.5:11434/v1")
	upstreams, err := cfg.Upstreams()
	if err != nil {
		t.Fatal(err)
	}
	e.restart(t, withSealer(testSealer(t)), withUpstreams(upstreams))
	orgPath := "/api/v1/organizations/acme/credentials/"
	projPath := "/api/v1/projects/WEB/credentials/"
	refused := []struct {
		name, path, baseURL, why string
	}{
		{"loopback", orgPath + "anthropic", "http://127.0.0.1:8080", "http://127.0.0.1:8080 is not listed"},
		{"localhost", projPath + "openai", "http://localhost:11434/v1", "is not listed"},
		{"metadata address", orgPath + "openai", "http://169.254.169.254/latest", "is not listed"},
		{"official host over http", orgPath + "anthropic", "http://api.anthropic.com", "is not listed"},
		{"official host on another port", orgPath + "anthropic", "https://api.anthropic.com:8443", "is not listed"},
		{"lookalike", projPath + "openai", "https://api.openai.com.evil.example/v1", "is not listed"},
		{"listed host, other path", projPath + "openai", "http://10.0.0.5:11434/admin", "is not listed"},
		{"listed prefix as a word prefix", projPath + "openai", "http://10.0.0.5:11434/v10", "is not listed"},
		{"dot segments", projPath + "openai", "http://10.0.0.5:11434/v1/../admin", ". or .."},
		{"escaped dots", projPath + "openai", "http://10.0.0.5:11434/v1/%2e%2e/admin", "percent-escapes"},
	}
	empty := credentialSnapshot(t, e)
	for _, c := range refused {
		t.Run(c.name, func(t *testing.T) {
			r := e.do("PUT", c.path, "admin", map[string]any{"api_key": "sk-test-1234", "base_url": c.baseURL}).expect(t, 400)
			if r.errorCode() != "invalid_argument" {
				t.Errorf("error %q, want invalid_argument; body %s", r.errorCode(), r.Raw)
			}
			msg := r.message()
			for _, want := range []string{"base_url: ", c.why, "gateway.allowed_upstreams"} {
				if !strings.Contains(msg, want) {
					t.Errorf("message %q does not contain %q", msg, want)
				}
			}
			if got := credentialSnapshot(t, e); got != empty {
				t.Errorf("a refusal wrote credentials: %s", got)
			}
		})
	}
	for _, c := range []struct{ path, baseURL string }{
		{orgPath + "anthropic", "https://api.anthropic.com"},
		{orgPath + "openai", "https://api.openai.com/v1"},
		{projPath + "openai", "http://10.0.0.5:11434/v1"},
	} {
		r := e.do("PUT", c.path, "admin", map[string]any{"api_key": "sk-test-1234", "base_url": c.baseURL}).expect(t, 200)
		if r.Body["base_url"] != c.baseURL {
			t.Errorf("base_url = %v, want %s", r.Body["base_url"], c.baseURL)
		}
	}
}
