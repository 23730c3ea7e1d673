package gateway

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/balletplanner/ballet/gateway/fakellm"
	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
)

const okScript = `
loop: true
answers:
  - content: [{text: "Hello there, how can I help?"}]
    usage: {input_tokens: 12, output_tokens: 7}
`

func TestAuthentication(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakellm.MustParse(okScript))
	sign := func(claims jwt.MapClaims, key string) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(key))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	base := func() jwt.MapClaims {
		return jwt.MapClaims{"iss": "ballet", "sub": "planner:x", "aud": "gateway", "org": e.org, "project": e.project,
			"cap": []string{"llm.invoke"}, "exp": time.Now().Add(10 * time.Minute).Unix()}
	}
	with := func(k string, v any) string {
		c := base()
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
		return sign(c, e.cfg.SigningKey)
	}
	tests := []struct {
		name   string
		token  string
		status int
		typ    string
	}{
		{"missing", "", 401, llm.ErrAuthentication},
		{"garbage", "not-a-token", 401, llm.ErrAuthentication},
		{"expired", with("exp", time.Now().Add(-time.Hour).Unix()), 401, llm.ErrAuthentication},
		{"no expiry", with("exp", nil), 401, llm.ErrAuthentication},
		{"wrong audience", with("aud", "api"), 401, llm.ErrAuthentication},
		{"wrong key", sign(base(), "another-key"), 401, llm.ErrAuthentication},
		{"no llm.invoke", with("cap", []string{"tracker.read"}), 403, llm.ErrPermission},
		{"unknown organization", with("org", "00000000-0000-0000-0000-000000000001"), 403, llm.ErrPermission},
		{"valid", e.token(t), 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			resp, body := e.post(t, tt.token, hello(false))
			if resp.StatusCode != tt.status {
				t.Fatalf("status = %d, want %d: %s", resp.StatusCode, tt.status, body)
			}
			if tt.typ != "" {
				if got := errorOf(t, body).Type; got != tt.typ {
					t.Fatalf("type = %s, want %s", got, tt.typ)
				}
			}
		})
	}
}

func TestTokenInXAPIKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakellm.MustParse(okScript))
	req, _ := http.NewRequest(http.MethodPost, e.url+"/v1/messages", strings.NewReader(`{"model":"claude-x","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("x-api-key", e.token(t))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status = %d", resp.StatusCode)
	}
	// The upstream got the provider's key, not the gateway token.
	got := e.fake.Requests()[0].Header.Get("x-api-key")
	if got != "sk-test-anthropic" {
		t.Fatalf("upstream x-api-key = %q", got)
	}
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakellm.MustParse(okScript))
	tests := []struct {
		name string
		body string
	}{
		{"not json", `{`},
		{"no model", `{"max_tokens":10,"messages":[]}`},
		{"no max_tokens", `{"model":"claude-x","messages":[]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			resp, body := e.post(t, e.token(t), []byte(tt.body))
			if resp.StatusCode != 400 || errorOf(t, body).Type != llm.ErrInvalidRequest {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
		})
	}
}

func TestCredentialResolution(t *testing.T) {
	t.Parallel()
	t.Run("none", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, fakellm.MustParse(okScript), withProvider(""))
		resp, body := e.post(t, e.token(t), hello(false))
		if resp.StatusCode != 403 {
			t.Fatalf("status = %d: %s", resp.StatusCode, body)
		}
		d := errorOf(t, body)
		if d.Type != llm.ErrPermission {
			t.Fatalf("type = %s", d.Type)
		}
		mustContain(t, d.Message, "no provider credential", "project DEMO", "acme")
	})
	t.Run("none but fake", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, fakellm.MustParse(okScript), withProvider(""), withFallback(fakellm.Demo()))
		// The fake answers only its models, as an upstream does.
		resp, body := e.post(t, e.token(t), hello(false))
		if d := errorOf(t, body); resp.StatusCode != http.StatusNotFound || d.Type != llm.ErrNotFound {
			t.Fatalf("unknown model: %d %s", resp.StatusCode, body)
		}
		mustContain(t, errorOf(t, body).Message, `model: "claude-test" is not a model of the demo's fake`, "gateway.fake_models: claude-demo, claude-sonnet-5-5")
		req := hello(false)
		req.Model = "claude-demo"
		msg, err := e.client.Create(context.Background(), e.principal(), req)
		if err != nil {
			t.Fatal(err)
		}
		if msg.Content[len(msg.Content)-1].Name != "list_runnable" {
			t.Fatalf("the demo did not answer: %+v", msg)
		}
	})
	t.Run("project override wins", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, fakellm.MustParse(okScript))
		// The organization's default points nowhere; the project's override at the fake.
		e.putCredential(t, "", store.ProviderAnthropic, "http://127.0.0.1:1")
		e.putCredential(t, e.project, store.ProviderAnthropic, e.fake.URL())
		if _, err := e.client.Create(context.Background(), e.principal(), hello(false)); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("sealed with another key", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, fakellm.MustParse(okScript), withProvider(""))
		other, _ := NewSealer(make([]byte, 32))
		c := other.SealCredential(e.org, "", store.ProviderAnthropic, "sk", "", "alice")
		if _, err := e.db.PutCredential(context.Background(), c); err != nil {
			t.Fatal(err)
		}
		resp, body := e.post(t, e.token(t), hello(false))
		if resp.StatusCode != 500 || errorOf(t, body).Type != llm.ErrAPI {
			t.Fatalf("status = %d: %s", resp.StatusCode, body)
		}
	})
}

func TestUpstream429ThenSuccessIsRetriedAndMeteredOnce(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "json", true: "stream"}[stream], func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, fakellm.MustParse(`
answers:
  - fault: {kind: status, status: 429, retry_after: 0}
  - fault: {kind: status, status: 529}
  - content: [{text: "finally"}]
    usage: {input_tokens: 20, output_tokens: 3}
`))
			var text string
			if stream {
				s, err := e.client.Stream(context.Background(), e.principal(), hello(true))
				if err != nil {
					t.Fatal(err)
				}
				msg, err := s.Collect(nil)
				if err != nil {
					t.Fatal(err)
				}
				text = msg.Content.Text()
			} else {
				msg, err := e.client.Create(context.Background(), e.principal(), hello(false))
				if err != nil {
					t.Fatal(err)
				}
				text = msg.Content.Text()
			}
			if text != "finally" {
				t.Fatalf("text = %q", text)
			}
			if n := len(e.fake.Requests()); n != 3 {
				t.Fatalf("upstream got %d requests, want 3", n)
			}
			rows := e.usageRows(t, 1)
			if len(rows) != 1 || rows[0].Status != 200 || rows[0].InputTokens != 20 || rows[0].OutputTokens != 3 || rows[0].Estimated {
				t.Fatalf("usage rows = %+v", rows)
			}
			if got := e.counter(t, "ballet_llm_requests_total", nil); got != 1 {
				t.Fatalf("requests_total = %v, want 1", got)
			}
			if got := e.counter(t, "ballet_llm_upstream_retries_total", nil); got != 2 {
				t.Fatalf("retries = %v, want 2", got)
			}
		})
	}
}

func TestUpstreamErrorsPassThroughAfterRetries(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakellm.MustParse(`
loop: true
answers:
  - fault: {kind: status, status: 429, retry_after: 0, message: "slow down please"}
`), withConfig(func(c *Config) { c.RetryMaxAttempts = 2 }))
	resp, body := e.post(t, e.token(t), hello(false))
	if resp.StatusCode != 429 {
		t.Fatalf("status = %d", resp.StatusCode)
	}
	if d := errorOf(t, body); d.Type != llm.ErrRateLimit || d.Message != "slow down please" {
		t.Fatalf("error = %+v", d)
	}
	if resp.Header.Get("Retry-After") != "0" {
		t.Fatalf("Retry-After = %q", resp.Header.Get("Retry-After"))
	}
	if n := len(e.fake.Requests()); n != 2 {
		t.Fatalf("upstream got %d requests, want 2", n)
	}
}

func TestUpstream500AfterFirstByteIsNotRetried(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakellm.MustParse(`
answers:
  - content: [{text: "The first part arrives, then the upstream fails."}]
    chunk_size: 8
    usage: {input_tokens: 30, output_tokens: 12}
    fault: {kind: error_event, status: 500, after: 5}
  - content: [{text: "a retry would get this"}]
`))
	s, err := e.client.Stream(context.Background(), e.principal(), hello(true))
	if err != nil {
		t.Fatal(err)
	}
	var got string
	_, err = s.Collect(func(p string) { got += p })
	var ae *llm.APIError
	if !errors.As(err, &ae) || ae.Type != llm.ErrAPI {
		t.Fatalf("err = %v, want an api_error event", err)
	}
	if got == "" || !strings.HasPrefix("The first part arrives, then the upstream fails.", got) {
		t.Fatalf("text before the error = %q", got)
	}
	if n := len(e.fake.Requests()); n != 1 {
		t.Fatalf("upstream got %d requests, want 1 (no retry after the first byte)", n)
	}
	rows := e.usageRows(t, 1)
	if len(rows) != 1 || rows[0].Status != 500 || rows[0].InputTokens != 30 {
		t.Fatalf("usage = %+v", rows)
	}
}

func TestUpstreamDisconnectMidStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakellm.MustParse(`
answers:
  - content: [{text: "This answer is cut off in the middle of its stream."}]
    chunk_size: 8
    usage: {input_tokens: 40, output_tokens: 14}
    fault: {kind: disconnect, after: 5}
  - content: [{text: "a retry would get this"}]
`))
	s, err := e.client.Stream(context.Background(), e.principal(), hello(true))
	if err != nil {
		t.Fatal(err)
	}
	var got string
	_, err = s.Collect(func(p string) { got += p })
	var ae *llm.APIError
	if !errors.As(err, &ae) || ae.Type != llm.ErrAPI {
		t.Fatalf("err = %v, want an api_error event", err)
	}
	mustContain(t, ae.Message, "upstream stream broke off")
	if got == "" {
		t.Fatal("no text before the break")
	}
	if n := len(e.fake.Requests()); n != 1 {
		t.Fatalf("upstream got %d requests, want 1", n)
	}
	rows := e.usageRows(t, 1)
	if len(rows) != 1 || rows[0].Status != 502 || rows[0].InputTokens != 40 || !rows[0].Estimated ||
		rows[0].OutputTokens != int64(estimateTokens(len(got))) {
		t.Fatalf("usage = %+v (text %q)", rows, got)
	}
}

func TestDisconnectBeforeFirstEventIsRetried(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakellm.MustParse(`
answers:
  - content: [{text: "lost"}]
    fault: {kind: disconnect, after: 0}
  - content: [{text: "second try"}]
    usage: {input_tokens: 5, output_tokens: 2}
`))
	s, err := e.client.Stream(context.Background(), e.principal(), hello(true))
	if err != nil {
		t.Fatal(err)
	}
	msg, err := s.Collect(nil)
	if err != nil || msg.Content.Text() != "second try" {
		t.Fatalf("msg = %+v, err = %v", msg, err)
	}
}

func TestMalformedUpstream(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "json", true: "stream"}[stream], func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, fakellm.MustParse(`
loop: true
answers:
  - content: [{text: "x"}]
    fault: {kind: malformed}
`))
			resp, body := e.post(t, e.token(t), hello(stream))
			if resp.StatusCode != 502 {
				t.Fatalf("status = %d: %s", resp.StatusCode, body)
			}
			d := errorOf(t, body)
			if d.Type != llm.ErrAPI {
				t.Fatalf("type = %s", d.Type)
			}
			mustContain(t, d.Message, "malformed")
			if n := len(e.fake.Requests()); n != 1 {
				t.Fatalf("upstream got %d requests, want 1", n)
			}
		})
	}
}

func TestClientCancelClosesUpstream(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakellm.MustParse(`
answers:
  - content: [{text: "This answer trickles in so slowly that only a cancel ends it early."}]
    chunk_size: 2
    chunk_latency: 2s
`))
	ctx, cancel := context.WithCancel(context.Background())
	s, err := e.client.Stream(ctx, e.principal(), hello(true))
	if err != nil {
		t.Fatal(err)
	}
	for s.Next() {
		if s.Event().Type == llm.EventStart {
			break
		}
	}
	cancel()
	for s.Next() {
	}
	if !errors.Is(s.Err(), context.Canceled) {
		t.Fatalf("err = %v", s.Err())
	}
	s.Close()
	// The gateway saw the caller go and recorded it; the fake's request ended.
	storetest.WaitFor(t, "the upstream request to end and its usage row", func() bool {
		return e.fake.Active() == 0 && len(e.readUsage(t)) > 0
	})
	if rows := e.usageRows(t, 1); rows[0].Status != statusClientClosed {
		t.Fatalf("usage = %+v", rows)
	}
}
