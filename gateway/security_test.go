package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/balletplanner/ballet/gateway/fakellm"
	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/store"
)

// recorder is an HTTP server standing in for a host the operator did not
// allow (a loopback admin port, say); it counts what reaches it.
type recorder struct {
	*httptest.Server
	hits atomic.Int64
	keys atomic.Int64 // requests that carried an API key
}

func newRecorder(t *testing.T) *recorder {
	t.Helper()
	r := &recorder{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.hits.Add(1)
		if req.Header.Get("x-api-key") != "" || req.Header.Get("Authorization") != "" {
			r.keys.Add(1)
		}
		w.Write([]byte(`{"internal":"admin console secret"}`))
	}))
	t.Cleanup(r.Close)
	return r
}

func TestCredentialBaseURLOutsideAllowListIsRefusedAtUse(t *testing.T) {
	t.Parallel()
	internal := newRecorder(t)
	e := newEnv(t, fakellm.MustParse(okScript), withProvider(""), withConfig(func(c *Config) { c.CacheTTL = 0 }))
	fake, _ := url.Parse(e.fake.URL())
	in, _ := url.Parse(internal.URL)
	tests := []struct {
		name     string
		provider string
		baseURL  string
	}{
		{"loopback", store.ProviderAnthropic, internal.URL},
		{"loopback openai", store.ProviderOpenAI, internal.URL + "/v1"},
		{"allowed host as userinfo", store.ProviderAnthropic, "http://" + fake.Host + "@" + in.Host},
		{"same host other port", store.ProviderAnthropic, "http://" + fake.Hostname() + ":" + in.Port()},
		{"localhost alias of an allowed address", store.ProviderAnthropic, "http://localhost:" + fake.Port()},
		{"https instead of http", store.ProviderAnthropic, "https://" + fake.Host},
		{"official host over http", store.ProviderAnthropic, "http://api.anthropic.com"},
		{"official host on another port", store.ProviderAnthropic, "https://api.anthropic.com:8443"},
		{"lookalike host", store.ProviderOpenAI, "https://api.openai.com.evil.example/v1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// One credential per scope: these run one after the other.
			e.putCredential(t, "", tt.provider, tt.baseURL)
			t.Cleanup(func() {
				if _, err := e.db.Pool().Exec(context.Background(), `DELETE FROM credentials`); err != nil {
					t.Error(err)
				}
			})
			model := "claude-test"
			if tt.provider == store.ProviderOpenAI {
				model = "gpt-test"
			}
			req := hello(false)
			req.Model = model
			before := len(e.fake.Requests())
			resp, body := e.post(t, e.token(t), req)
			if resp.StatusCode != http.StatusForbidden {
				t.Fatalf("status = %d, want 403: %s", resp.StatusCode, body)
			}
			d := errorOf(t, body)
			if d.Type != llm.ErrPermission {
				t.Fatalf("type = %s, want %s", d.Type, llm.ErrPermission)
			}
			mustContain(t, d.Message, "base_url", "gateway.allowed_upstreams")
			if strings.Contains(string(body), "secret") {
				t.Fatalf("the reply carries the internal host's body: %s", body)
			}
			if n := internal.hits.Load(); n != 0 {
				t.Fatalf("the internal host got %d requests (%d with a key)", n, internal.keys.Load())
			}
			if n := len(e.fake.Requests()) - before; n != 0 {
				t.Fatalf("an upstream got %d requests", n)
			}
		})
	}
}

// rawUpstream answers every call with one status and body.
func rawUpstream(t *testing.T, status int, contentType, body string) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(status)
		w.Write([]byte(body))
	}))
	t.Cleanup(s.Close)
	return s
}

func TestUpstreamErrorBodiesAreNeverRelayedRaw(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 5000) // multi-byte: a cut must keep UTF-8 whole
	tests := []struct {
		name        string
		provider    string
		status      int
		contentType string
		body        string
		wantType    string
		wantMessage string // exact, or a prefix when wantPrefix
		wantPrefix  bool
	}{
		{"anthropic error kept short", store.ProviderAnthropic, 400, "application/json",
			`{"type":"error","error":{"type":"invalid_request_error","message":"bad model"},"leak":"secret"}`,
			llm.ErrInvalidRequest, "bad model", false},
		{"anthropic long message truncated", store.ProviderAnthropic, 404, "application/json",
			`{"type":"error","error":{"type":"not_found_error","message":"` + long + `"}}`,
			llm.ErrNotFound, strings.Repeat("é", 100), true},
		{"anthropic unknown error type", store.ProviderAnthropic, 400, "application/json",
			`{"type":"error","error":{"type":"<script>secret","message":"no"}}`,
			llm.ErrInvalidRequest, "no", false},
		{"openai shape from anthropic host", store.ProviderAnthropic, 401, "application/json",
			`{"error":{"message":"bad key","secret":"x"}}`, llm.ErrAuthentication, "bad key", false},
		{"html page", store.ProviderAnthropic, 404, "text/html",
			`<html><body>admin console secret</body></html>`, llm.ErrNotFound, "upstream anthropic answered 404 Not Found", false},
		{"json not provider shaped", store.ProviderAnthropic, 403, "application/json",
			`{"internal":"admin console secret"}`, llm.ErrPermission, "upstream anthropic answered 403 Forbidden", false},
		{"openai error", store.ProviderOpenAI, 400, "application/json",
			`{"error":{"message":"model not found","type":"invalid_request_error","param":"secret"}}`,
			llm.ErrInvalidRequest, "model not found", false},
		{"openai long message", store.ProviderOpenAI, 422, "application/json",
			`{"error":{"message":"` + long + `"}}`, llm.ErrInvalidRequest, strings.Repeat("é", 100), true},
		{"openai plain text", store.ProviderOpenAI, 404, "text/plain",
			"404 page not found: secret", llm.ErrNotFound, "upstream openai answered 404 Not Found", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			up := rawUpstream(t, tt.status, tt.contentType, tt.body)
			e := newEnv(t, fakellm.MustParse(okScript), withProvider(""),
				withConfig(func(c *Config) { c.AllowedUpstreams = append(c.AllowedUpstreams, up.URL) }))
			base, model := up.URL, "claude-test"
			if tt.provider == store.ProviderOpenAI {
				base, model = up.URL+"/v1", "gpt-test"
			}
			e.putCredential(t, "", tt.provider, base)
			req := hello(false)
			req.Model = model
			resp, body := e.post(t, e.token(t), req)
			if resp.StatusCode != tt.status {
				t.Fatalf("status = %d, want %d: %s", resp.StatusCode, tt.status, body)
			}
			if strings.Contains(string(body), "secret") {
				t.Fatalf("the raw upstream body reached the caller: %s", body)
			}
			var eb map[string]any
			if err := json.Unmarshal(body, &eb); err != nil || len(eb) != 3 || eb["request_id"] != resp.Header.Get("request-id") {
				t.Fatalf("not a bare Anthropic error (type, error, request_id): %s", body)
			}
			d := errorOf(t, body)
			if d.Type != tt.wantType {
				t.Fatalf("type = %q, want %q", d.Type, tt.wantType)
			}
			if tt.wantPrefix {
				if !strings.HasPrefix(d.Message, tt.wantMessage) || len([]rune(d.Message)) > maxUpstreamMessage+1 {
					t.Fatalf("message (%d runes) not a short prefix: %.80q", len([]rune(d.Message)), d.Message)
				}
				if !json.Valid(body) || strings.ContainsRune(d.Message, '\uFFFD') {
					t.Fatalf("message cut inside a character: %q", d.Message)
				}
			} else if d.Message != tt.wantMessage {
				t.Fatalf("message = %q, want %q", d.Message, tt.wantMessage)
			}
		})
	}
}

func TestStreamedUpstreamErrorIsSanitized(t *testing.T) {
	t.Parallel()
	up := rawUpstream(t, 200, "text/event-stream",
		"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"bad\"},\"leak\":\"secret\"}\n\n")
	e := newEnv(t, fakellm.MustParse(okScript), withProvider(""),
		withConfig(func(c *Config) { c.AllowedUpstreams = append(c.AllowedUpstreams, up.URL) }))
	e.putCredential(t, "", store.ProviderAnthropic, up.URL)
	resp, body := e.post(t, e.token(t), hello(true))
	if resp.StatusCode != 400 || strings.Contains(string(body), "secret") {
		t.Fatalf("status = %d: %s", resp.StatusCode, body)
	}
	if d := errorOf(t, body); d.Type != llm.ErrInvalidRequest || d.Message != "bad" {
		t.Fatalf("error = %+v", d)
	}
}

func TestTokenClaimsThatAreNotUUIDsAreUnauthenticated(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakellm.MustParse(okScript))
	sign := func(org, project string) string {
		c := jwt.MapClaims{"iss": "ballet", "sub": "planner:x", "aud": "gateway", "org": org,
			"cap": []string{"llm.invoke"}, "exp": time.Now().Add(time.Minute).Unix()}
		if project != "" {
			c["project"] = project
		}
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString([]byte(e.cfg.SigningKey))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	tests := []struct {
		name, org, project, want string
	}{
		{"organization key", "acme", "", "organization"},
		{"organization injection", "' OR 1=1 --", "", "organization"},
		{"project key", e.org, "DEMO", "project"},
		{"project almost a uuid", e.org, e.project[:35] + "g", "project"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			resp, body := e.post(t, sign(tt.org, tt.project), hello(false))
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("status = %d, want 401: %s", resp.StatusCode, body)
			}
			d := errorOf(t, body)
			if d.Type != llm.ErrAuthentication {
				t.Fatalf("type = %s", d.Type)
			}
			mustContain(t, d.Message, tt.want, "UUID")
		})
	}
}

func TestModelNamesAreBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakellm.MustParse(okScript))
	tests := []struct {
		name   string
		model  string
		status int
	}{
		{"too long", "claude-" + strings.Repeat("x", maxModelLen), 400},
		{"space", "claude sonnet", 400},
		{"newline", "claude\nsonnet", 400},
		{"quote", `claude"x`, 400},
		{"braces", "claude{x}", 400},
		{"non-ascii", "claude-模型", 400},
		{"nul", "claude\x00", 400},
		{"longest", "claude-" + strings.Repeat("x", maxModelLen-7), 200},
		{"ollama tag", "llama3.1:8b", 200},
		{"vllm path", "meta-llama/Llama-3.1-8B-Instruct", 200},
		{"dated", "claude-sonnet-4-5@20250929", 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := hello(false)
			req.Model = tt.model
			resp, body := e.post(t, e.token(t), req)
			if resp.StatusCode != tt.status {
				t.Fatalf("status = %d, want %d: %s", resp.StatusCode, tt.status, body)
			}
			if tt.status != 400 {
				return
			}
			d := errorOf(t, body)
			if d.Type != llm.ErrInvalidRequest || !strings.HasPrefix(d.Message, "model: ") {
				t.Fatalf("error = %+v", d)
			}
			if n := e.counter(t, "ballet_llm_requests_total", map[string]string{"model": tt.model}); n != 0 {
				t.Fatalf("a refused model became a metric label (%v calls)", n)
			}
		})
	}
	// After every subtest: only the accepted calls left usage rows.
	t.Cleanup(func() {
		rows := e.usageRows(t, 4)
		if len(rows) != 4 {
			t.Errorf("%d usage rows, want 4 (the accepted calls)", len(rows))
		}
		for _, u := range rows {
			if len(u.Model) > maxModelLen || strings.ContainsAny(u.Model, " \n\"{\x00") {
				t.Errorf("usage row for a refused model %q", u.Model)
			}
		}
	})
}

func TestModelLabelsAreBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakellm.MustParse(okScript), withConfig(func(c *Config) { c.MaxModelLabels = 3 }))
	for i := range 10 {
		req := hello(false)
		req.Model = "claude-" + strings.Repeat("v", i+1)
		if resp, body := e.post(t, e.token(t), req); resp.StatusCode != 200 {
			t.Fatalf("status = %d: %s", resp.StatusCode, body)
		}
	}
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	models := map[string]bool{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "ballet_llm_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "model" {
					models[lp.GetValue()] = true
				}
			}
		}
	}
	if len(models) != 4 || !models[otherModelLabel] || !models["claude-v"] {
		t.Fatalf("model labels = %v, want the first 3 and %s", models, otherModelLabel)
	}
	if got := e.counter(t, "ballet_llm_requests_total", map[string]string{"model": otherModelLabel}); got != 7 {
		t.Fatalf("%s calls = %v, want 7", otherModelLabel, got)
	}
}
