package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"

	"github.com/balletplanner/ballet/gateway/fakellm"
	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/store"
)

// openaiErrorOf decodes an OpenAI error body.
func openaiErrorOf(t testing.TB, body []byte) (typ, code, msg string) {
	t.Helper()
	var eb struct {
		Error *struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Code    *string `json:"code"`
		} `json:"error"`
		Type string `json:"type"`
	}
	if err := json.Unmarshal(body, &eb); err != nil || eb.Error == nil || eb.Type != "" {
		t.Fatalf("not an OpenAI error: %s", body)
	}
	if eb.Error.Code != nil {
		code = *eb.Error.Code
	}
	return eb.Error.Type, code, eb.Error.Message
}

func TestEmbeddingsLimits(t *testing.T) {
	t.Parallel()
	first := fakeTokens(embedTexts)
	tests := []struct {
		name   string
		limits store.Limits
		status int
		typ    string
		code   string
		want   string
	}{
		{"budget spent by the first call", store.Limits{TokenBudget: int64p(first), BudgetPeriod: store.BudgetDay}, 403, llm.ErrPermission,
			"budget_exceeded", "token budget spent: project DEMO has used " + jsonInt(first) + " of its " + jsonInt(first) + " tokens this day"},
		{"requests per minute", store.Limits{RequestsPerMinute: int64p(1)}, 429, llm.ErrRateLimit,
			"rate_limit_exceeded", "rate limit exceeded: project DEMO allows 1 requests per minute"},
		{"tokens per minute", store.Limits{TokensPerMinute: int64p(first)}, 429, llm.ErrRateLimit,
			"rate_limit_exceeded", "rate limit exceeded: project DEMO allows " + jsonInt(first) + " tokens per minute and has used " + jsonInt(first)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, fakellm.MustParse(okScript), withProvider(store.ProviderOpenAI))
			lim := tt.limits
			lim.OrganizationID, lim.ProjectID, lim.UpdatedBy = e.org, e.project, "alice"
			if lim.BudgetPeriod == "" {
				lim.BudgetPeriod = store.BudgetMonth
			}
			if _, err := e.db.PutLimits(context.Background(), lim); err != nil {
				t.Fatal(err)
			}
			client := e.openaiSDK(t)
			if _, err := client.Embeddings.New(context.Background(), embedParams(embedTexts...)); err != nil {
				t.Fatalf("first call: %v", err)
			}
			_, err := client.Embeddings.New(context.Background(), embedParams(embedTexts...))
			var oe *openai.Error
			if !errors.As(err, &oe) || oe.StatusCode != tt.status {
				t.Fatalf("second call: %v, want %d", err, tt.status)
			}
			if oe.Type != tt.typ || oe.Code != tt.code || !strings.HasPrefix(oe.Message, tt.want) {
				t.Fatalf("error = type %q code %q %q, want %q", oe.Type, oe.Code, oe.Message, tt.want)
			}
			if oe.Response.Header.Get("Retry-After") == "" {
				t.Fatal("no Retry-After")
			}
			// The refusal is counted, not metered: one usage row, the first call's.
			if n := e.counter(t, "ballet_llm_requests_total", map[string]string{"status": jsonInt(int64(tt.status))}); n != 1 {
				t.Fatalf("refusals counted = %v", n)
			}
			if rows := e.usageRows(t, 1); len(rows) != 1 || rows[0].InputTokens != first {
				t.Fatalf("usage rows = %+v", rows)
			}
			if n := len(embeddingRequests(e.fake)); n != 1 {
				t.Fatalf("%d upstream calls, want 1", n)
			}
		})
	}
}

func TestEmbeddingsNeedAnOpenAICompatibleUpstream(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts []envOption
	}{
		{"no credential", []envOption{withProvider("")}},
		{"anthropic credential only", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, fakellm.MustParse(okScript), tt.opts...)
			client := e.openaiSDK(t)
			_, err := client.Embeddings.New(context.Background(), embedParams(embedTexts...))
			var oe *openai.Error
			if !errors.As(err, &oe) || oe.StatusCode != 403 || oe.Type != llm.ErrPermission || oe.Code != "no_credential" {
				t.Fatalf("err = %v", err)
			}
			mustContain(t, oe.Message, "no openai credential for project DEMO or its organization acme", "OpenAI-compatible")
			// The OpenAI SDKs take a request's id from x-request-id.
			if id := oe.Response.Header.Get("x-request-id"); !strings.HasPrefix(id, "gwreq_") || id != oe.Response.Header.Get("request-id") {
				t.Fatalf("x-request-id = %q", id)
			}
			if n := len(e.fake.Requests()); n != 0 {
				t.Fatalf("the upstream got %d calls", n)
			}
		})
	}
}

func TestEmbeddingsBadInputsAreRefusedUnmetered(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakellm.MustParse(okScript), withProvider(store.ProviderOpenAI), withConfig(func(c *Config) {
		c.EmbeddingsMaxInputs, c.EmbeddingsMaxInputBytes = 3, 64
	}))
	long := strings.Repeat("x", 65)
	tests := []struct {
		name   string
		body   string
		status int
		code   string
		want   string
	}{
		{"no input", `{"model":"m"}`, 400, "invalid_input", "input: field required"},
		{"null input", `{"model":"m","input":null}`, 400, "invalid_input", "input: field required"},
		{"empty string", `{"model":"m","input":""}`, 400, "invalid_input", "input: must not be empty"},
		{"empty array", `{"model":"m","input":[]}`, 400, "invalid_input", "input: must not be an empty array"},
		{"empty item", `{"model":"m","input":["a",""]}`, 400, "invalid_input", "input.1: must not be empty"},
		{"token ids", `{"model":"m","input":[101,202]}`, 400, "unsupported_input", "input: arrays of token ids are not supported"},
		{"token id arrays", `{"model":"m","input":[[101],[202]]}`, 400, "unsupported_input", "input: arrays of token ids are not supported"},
		{"number", `{"model":"m","input":5}`, 400, "invalid_input", "input: must be a string or an array of strings"},
		{"object", `{"model":"m","input":{"text":"a"}}`, 400, "invalid_input", "input: must be a string or an array of strings"},
		{"bool item", `{"model":"m","input":["a",true]}`, 400, "invalid_input", "input.1: must be a string"},
		{"too many", `{"model":"m","input":["a","b","c","d"]}`, 400, "invalid_input", "input: at most 3 texts per call (gateway.embeddings_max_inputs), got 4"},
		{"too large", `{"model":"m","input":["` + long + `"]}`, 413, "request_too_large", "input: at most 64 bytes of text per call (gateway.embeddings_max_input_bytes), got 65"},
		{"no model", `{"input":"a"}`, 400, "", "model: field required"},
		{"bad model", `{"model":"a b","input":"a"}`, 400, "", "model: only letters"},
		{"encoding", `{"model":"m","input":"a","encoding_format":"int8"}`, 400, "invalid_input", `encoding_format: must be float or base64, got "int8"`},
		{"dimensions", `{"model":"m","input":"a","dimensions":0}`, 400, "invalid_input", "dimensions: must be at least 1"},
		{"not json", `{`, 400, "", "body: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			resp, body := e.send(t, http.MethodPost, "/v1/embeddings", e.token(t), []byte(tt.body))
			if resp.StatusCode != tt.status {
				t.Fatalf("status = %d, want %d: %s", resp.StatusCode, tt.status, body)
			}
			typ, code, msg := openaiErrorOf(t, body)
			if typ != llm.ErrorTypeForStatus(tt.status) || code != tt.code || !strings.HasPrefix(msg, tt.want) {
				t.Fatalf("error = type %q code %q %q, want code %q %q", typ, code, msg, tt.code, tt.want)
			}
		})
	}
	t.Run("token ids through the SDK", func(t *testing.T) {
		t.Parallel()
		client := e.openaiSDK(t)
		_, err := client.Embeddings.New(context.Background(), openai.EmbeddingNewParams{Model: "m",
			Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfTokens: []int64{1, 2, 3}}})
		var oe *openai.Error
		if !errors.As(err, &oe) || oe.StatusCode != 400 || oe.Code != "unsupported_input" {
			t.Fatalf("err = %v", err)
		}
		mustContain(t, oe.Message, "send the texts as strings")
	})
	t.Cleanup(func() {
		if n := len(e.fake.Requests()); n != 0 {
			t.Errorf("the upstream got %d calls", n)
		}
		for _, name := range []string{"ballet_llm_requests_total", "ballet_llm_tokens_total"} {
			if n := e.counter(t, name, nil); n != 0 {
				t.Errorf("%s = %v, want 0", name, n)
			}
		}
		if rows := e.readUsage(t); len(rows) != 0 {
			t.Errorf("usage rows: %+v", rows)
		}
	})
}

func TestEmbedderThroughTheGateway(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakellm.MustParse(okScript), withProvider(store.ProviderOpenAI), withConfig(func(c *Config) { c.CacheTTL = 0 }))
	emb := llm.Embedder{Client: e.client, EmbeddingModel: "text-embedding-test", Who: e.principal()}
	if emb.Model() != "text-embedding-test" {
		t.Fatalf("model = %q", emb.Model())
	}
	vecs, err := emb.Embed(context.Background(), embedTexts)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vecs {
		got := make([]float64, len(v))
		for j, x := range v {
			got[j] = float64(x)
		}
		sameVector(t, got, fakellm.Embed(embedTexts[i]))
	}
	if vecs, err := emb.Embed(context.Background(), nil); err != nil || vecs != nil {
		t.Fatalf("no texts: %v, %v", vecs, err)
	}
	if u := e.usageRows(t, 1); len(u) != 1 || !strings.HasPrefix(u[0].Caller, "planner:") || u[0].InputTokens != fakeTokens(embedTexts) {
		t.Fatalf("usage rows = %+v", u)
	}
	// A refusal is an *llm.APIError with the gateway's type and message.
	if _, err := e.db.PutLimits(context.Background(), store.Limits{OrganizationID: e.org, ProjectID: e.project,
		TokenBudget: int64p(0), BudgetPeriod: store.BudgetMonth, UpdatedBy: "alice"}); err != nil {
		t.Fatal(err)
	}
	_, err = emb.Embed(context.Background(), embedTexts)
	var ae *llm.APIError
	if !errors.As(err, &ae) || ae.Status != 403 || ae.Type != llm.ErrPermission {
		t.Fatalf("err = %v", err)
	}
	mustContain(t, ae.Message, "token budget spent")
}
