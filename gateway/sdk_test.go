package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/balletplanner/ballet/gateway/fakellm"
	"github.com/balletplanner/ballet/store"
)

// bodyRecorder keeps the bodies an SDK client sends.
type bodyRecorder struct {
	mu     sync.Mutex
	bodies [][]byte
}

func (b *bodyRecorder) middleware(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	if req.Body != nil {
		raw, _ := io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(raw))
		b.mu.Lock()
		b.bodies = append(b.bodies, raw)
		b.mu.Unlock()
	}
	return next(req)
}

func (b *bodyRecorder) last() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.bodies[len(b.bodies)-1]
}

// anthropicSDK is the official Anthropic client pointed at the gateway,
// with the env's token as its API key and no retries of its own.
func (e *env) anthropicSDK(t *testing.T, opts ...option.RequestOption) anthropic.Client {
	t.Helper()
	return anthropic.NewClient(append([]option.RequestOption{option.WithBaseURL(e.url), option.WithAPIKey(e.token(t)),
		option.WithMaxRetries(0)}, opts...)...)
}

func countParams() anthropic.MessageCountTokensParams {
	return anthropic.MessageCountTokensParams{Model: "claude-test", System: anthropic.MessageCountTokensParamsSystemUnion{
		OfString: anthropic.String("You are the planner.")},
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("How many tokens is this?"))}}
}

func TestCountTokensThroughTheAnthropicSDK(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		opts     []envOption
		model    string
		want     string // the ballet-token-count header
		upstream bool   // whether the env's fake counts (else the fallback or nobody)
	}{
		{"anthropic credential", nil, "claude-test", TokenCountExact, true},
		{"openai credential", []envOption{withProvider(store.ProviderOpenAI)}, "gpt-test", TokenCountEstimated, false},
		{"openai credential, claude model", []envOption{withProvider(store.ProviderOpenAI)}, "claude-test", TokenCountEstimated, false},
		{"fallback", []envOption{withProvider(""), withFallback(fakellm.MustParse(okScript))}, "claude-demo", TokenCountExact, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, fakellm.MustParse(okScript), tt.opts...)
			rec := &bodyRecorder{}
			client := e.anthropicSDK(t, option.WithMiddleware(rec.middleware))
			var resp *http.Response
			params := countParams()
			params.Model = tt.model
			got, err := client.Messages.CountTokens(context.Background(), params, option.WithResponseInto(&resp))
			if err != nil {
				t.Fatal(err)
			}
			if h := resp.Header.Get(TokenCountHeader); h != tt.want {
				t.Fatalf("%s = %q, want %q", TokenCountHeader, h, tt.want)
			}
			// Counted four characters a token, by the fake over the body it got
			// or by the gateway over the body the SDK sent: the same bytes.
			if want := int64(estimateTokens(len(rec.last()))); got.InputTokens != want {
				t.Fatalf("input_tokens = %d, want %d", got.InputTokens, want)
			}
			reqs := e.fake.Requests()
			if tt.upstream {
				if len(reqs) != 1 || reqs[0].Path != "/v1/messages/count_tokens" || reqs[0].Header.Get("x-api-key") != "sk-test-anthropic" {
					t.Fatalf("upstream requests = %+v", reqs)
				}
				if !bytes.Equal(reqs[0].Body, rec.last()) {
					t.Fatalf("the body was not passed through: %s", reqs[0].Body)
				}
			} else if len(reqs) != 0 {
				t.Fatalf("the provider's upstream got %d requests", len(reqs))
			}
			if resp.Header.Get("request-id") == "" {
				t.Fatal("no request-id header")
			}
			// It costs nothing: no usage row, no tokens, no model call counted.
			if n := e.counter(t, "ballet_llm_count_tokens_total", map[string]string{"count": tt.want, "status": "200", "project": "DEMO"}); n != 1 {
				t.Fatalf("ballet_llm_count_tokens_total = %v, want 1", n)
			}
			for _, name := range []string{"ballet_llm_requests_total", "ballet_llm_tokens_total"} {
				if n := e.counter(t, name, nil); n != 0 {
					t.Fatalf("%s = %v, want 0", name, n)
				}
			}
			if rows := e.readUsage(t); len(rows) != 0 {
				t.Fatalf("usage rows: %+v", rows)
			}
		})
	}
}

func TestCountTokensRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakellm.MustParse(okScript), withProvider(""))
	tests := []struct {
		name   string
		body   string
		status int
		want   string
	}{
		{"no credential", `{"model":"claude-test","messages":[]}`, 403, "no provider credential for project DEMO"},
		{"no model", `{"messages":[]}`, 400, "model: field required"},
		{"no messages", `{"model":"claude-test"}`, 400, "messages: field required"},
		{"not json", `{`, 400, "body: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			resp, body := e.send(t, http.MethodPost, "/v1/messages/count_tokens", e.token(t), []byte(tt.body))
			if resp.StatusCode != tt.status {
				t.Fatalf("status = %d, want %d: %s", resp.StatusCode, tt.status, body)
			}
			mustContain(t, errorOf(t, body).Message, tt.want)
		})
	}
}

func TestModelsThroughTheAnthropicSDK(t *testing.T) {
	t.Parallel()
	models := func(c *Config) {
		c.AnthropicModels = []string{"claude-a", "claude-b", "claude-c", "claude-d", "claude-e"}
		c.OpenAIModels = []string{"gpt-a", "claude-c", "meta-llama/Llama-3.1-8B-Instruct"}
		c.FakeModels = []string{"claude-demo", "fake-embedding"}
	}
	tests := []struct {
		name    string
		opts    []envOption
		project string // "" for none, else a provider with a project override
		want    []string
	}{
		{"anthropic", nil, "", []string{"claude-a", "claude-b", "claude-c", "claude-d", "claude-e"}},
		{"openai", []envOption{withProvider(store.ProviderOpenAI)}, "", []string{"gpt-a", "claude-c", "meta-llama/Llama-3.1-8B-Instruct"}},
		{"both", nil, store.ProviderOpenAI, []string{"claude-a", "claude-b", "claude-c", "claude-d", "claude-e", "gpt-a", "meta-llama/Llama-3.1-8B-Instruct"}},
		{"none, fallback", []envOption{withProvider(""), withFallback(fakellm.MustParse(okScript))}, "", []string{"claude-demo"}}, // not its embedding model
		{"none", []envOption{withProvider("")}, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, fakellm.MustParse(okScript), append(tt.opts, withConfig(models))...)
			if tt.project != "" {
				e.putCredential(t, e.project, tt.project, e.fake.URL()+"/v1")
			}
			client := e.anthropicSDK(t)
			ctx := context.Background()
			// Auto-paging two at a time walks the whole list, in order.
			var got []string
			pager := client.Models.ListAutoPaging(ctx, anthropic.ModelListParams{Limit: anthropic.Int(2)})
			for pager.Next() {
				m := pager.Current()
				if m.DisplayName != m.ID || string(m.Type) != "model" || m.CreatedAt.IsZero() {
					t.Fatalf("model = %+v", m)
				}
				got = append(got, m.ID)
			}
			if err := pager.Err(); err != nil {
				t.Fatal(err)
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Fatalf("models = %v, want %v", got, tt.want)
			}
			// One page: the cursors and has_more.
			page, err := client.Models.List(ctx, anthropic.ModelListParams{Limit: anthropic.Int(2)})
			if err != nil {
				t.Fatal(err)
			}
			if len(tt.want) == 0 {
				if len(page.Data) != 0 || page.HasMore || page.FirstID != "" || page.LastID != "" {
					t.Fatalf("empty page = %+v", page)
				}
			} else if page.FirstID != tt.want[0] || page.LastID != page.Data[len(page.Data)-1].ID || page.HasMore != (len(tt.want) > 2) {
				t.Fatalf("page = first %q last %q more %v", page.FirstID, page.LastID, page.HasMore)
			}
			// Every listed model can be fetched, whatever its characters.
			for _, id := range tt.want {
				m, err := client.Models.Get(ctx, id, anthropic.ModelGetParams{})
				if err != nil {
					t.Fatalf("get %s: %v", id, err)
				}
				if m.ID != id {
					t.Fatalf("get %s = %s", id, m.ID)
				}
			}
			_, err = client.Models.Get(ctx, "claude-unknown", anthropic.ModelGetParams{})
			var ae *anthropic.Error
			if !errors.As(err, &ae) || ae.StatusCode != 404 || ae.Type() != "not_found_error" {
				t.Fatalf("unknown model: %v", err)
			}
			mustContain(t, ae.Message, "claude-unknown", "is not available to project DEMO")
			if ae.RequestID == "" || ae.RequestID != ae.Response.Header.Get("request-id") {
				t.Fatalf("error request id = %q", ae.RequestID)
			}
		})
	}
}

func TestModelsPaging(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakellm.MustParse(okScript), withConfig(func(c *Config) {
		c.AnthropicModels = []string{"m1", "m2", "m3", "m4", "m5"}
	}))
	tests := []struct {
		name, query string
		status      int
		want        string // data ids, has_more, first_id, last_id
	}{
		{"default", "", 200, "m1 m2 m3 m4 m5|false|m1|m5"},
		{"limit", "?limit=2", 200, "m1 m2|true|m1|m2"},
		{"after", "?limit=2&after_id=m2", 200, "m3 m4|true|m3|m4"},
		{"after to the end", "?limit=2&after_id=m4", 200, "m5|false|m5|m5"},
		{"after the last", "?after_id=m5", 200, "|false||"},
		{"before", "?limit=2&before_id=m4", 200, "m2 m3|true|m2|m3"},
		{"before to the start", "?limit=2&before_id=m2", 200, "m1|false|m1|m1"},
		{"limit zero", "?limit=0", 400, "limit: must be an integer from 1 to 1000"},
		{"limit too big", "?limit=1001", 400, "limit: must be an integer from 1 to 1000"},
		{"limit not a number", "?limit=x", 400, "limit: must be an integer"},
		{"unknown cursor", "?after_id=m9", 400, `after_id: no listed model has the id "m9"`},
		{"both cursors", "?after_id=m1&before_id=m3", 400, "after_id and before_id: set at most one"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			resp, body := e.send(t, http.MethodGet, "/v1/models"+tt.query, e.token(t), nil)
			if resp.StatusCode != tt.status {
				t.Fatalf("status = %d, want %d: %s", resp.StatusCode, tt.status, body)
			}
			if tt.status != 200 {
				if d := errorOf(t, body); d.Type != "invalid_request_error" || !strings.HasPrefix(d.Message, tt.want) {
					t.Fatalf("error = %+v, want %q", d, tt.want)
				}
				return
			}
			if got := pageSummary(t, body); got != tt.want {
				t.Fatalf("page = %s, want %s", got, tt.want)
			}
		})
	}
}

// TestRequestIDHeader checks that the request id the SDK reports is the
// gateway's request-id, the id of the call's usage row, on success, error
// and stream.
func TestRequestIDHeader(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakellm.MustParse(okScript))
	client := e.anthropicSDK(t)
	ctx := context.Background()
	params := anthropic.MessageNewParams{Model: "claude-test", MaxTokens: 100,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello"))}}
	var resp *http.Response
	if _, err := client.Messages.New(ctx, params, option.WithResponseInto(&resp)); err != nil {
		t.Fatal(err)
	}
	id := resp.Header.Get("request-id")
	if !strings.HasPrefix(id, "gwreq_") || resp.Header.Get("x-ballet-request-id") != id || resp.Header.Get("x-request-id") != id {
		t.Fatalf("request-id = %q, x-ballet-request-id = %q", id, resp.Header.Get("x-ballet-request-id"))
	}
	stream := client.Messages.NewStreaming(ctx, params)
	for stream.Next() {
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	stream.Close()
	sresp, _ := e.send(t, http.MethodPost, "/v1/messages", e.token(t), []byte(`{"model":"claude-test","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	streamID := sresp.Header.Get("request-id")
	if sresp.StatusCode != 200 || !strings.HasPrefix(streamID, "gwreq_") || streamID == id {
		t.Fatalf("stream: status %d, request-id %q", sresp.StatusCode, streamID)
	}
	rows := e.usageRows(t, 3)
	ids := map[string]bool{}
	for _, r := range rows {
		ids[r.RequestID] = true
	}
	if !ids[id] || !ids[streamID] {
		t.Fatalf("usage request ids %v lack %s or %s", ids, id, streamID)
	}
	// An error answer carries one too, and the SDK reports it.
	params.MaxTokens = 0
	_, err := client.Messages.New(ctx, params)
	var ae *anthropic.Error
	if !errors.As(err, &ae) || ae.StatusCode != 400 || !strings.HasPrefix(ae.RequestID, "gwreq_") {
		t.Fatalf("error = %v", err)
	}
	// The body carries it as the Anthropic API's do, and x-request-id (what
	// the OpenAI SDKs read) is the same id.
	var body struct {
		Type      string `json:"type"`
		RequestID string `json:"request_id"`
	}
	if err := json.Unmarshal([]byte(ae.RawJSON()), &body); err != nil || body.Type != "error" || body.RequestID != ae.RequestID {
		t.Fatalf("error body = %s, want request_id %q", ae.RawJSON(), ae.RequestID)
	}
	if got := ae.Response.Header.Get("x-request-id"); got != ae.RequestID {
		t.Fatalf("x-request-id = %q, want %q", got, ae.RequestID)
	}
	// And an unknown route.
	nresp, _ := e.send(t, http.MethodGet, "/v1/nothing", "", nil)
	if nresp.StatusCode != 404 || nresp.Header.Get("request-id") == "" {
		t.Fatalf("unknown route: %d, request-id %q", nresp.StatusCode, nresp.Header.Get("request-id"))
	}
}

// pageSummary renders a models page as "ids|has_more|first_id|last_id".
func pageSummary(t *testing.T, body []byte) string {
	t.Helper()
	var p struct {
		Data []struct {
			Type, ID string
		} `json:"data"`
		HasMore bool    `json:"has_more"`
		FirstID *string `json:"first_id"`
		LastID  *string `json:"last_id"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("not a page: %s", body)
	}
	var ids []string
	for _, m := range p.Data {
		if m.Type != "model" {
			t.Fatalf("type = %q", m.Type)
		}
		ids = append(ids, m.ID)
	}
	deref := func(s *string) string {
		if s == nil {
			return ""
		}
		return *s
	}
	return fmt.Sprintf("%s|%v|%s|%s", strings.Join(ids, " "), p.HasMore, deref(p.FirstID), deref(p.LastID))
}
