package gateway

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/balletplanner/ballet/gateway/fakellm"
	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/store"
)

// openaiSDK is the official OpenAI client pointed at the gateway, with the
// env's token as its API key and no retries of its own.
func (e *env) openaiSDK(t *testing.T) openai.Client {
	t.Helper()
	return openai.NewClient(option.WithBaseURL(e.url+"/v1"), option.WithAPIKey(e.token(t)), option.WithMaxRetries(0))
}

var embedTexts = []string{"The login page is down", "Billing sends a refund twice", "Deploy the release on Friday"}

func embedParams(texts ...string) openai.EmbeddingNewParams {
	return openai.EmbeddingNewParams{Model: "text-embedding-test", Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: texts}}
}

// fakeTokens is what the fake reports for texts: four characters a token each.
func fakeTokens(texts []string) int64 {
	var n int64
	for _, t := range texts {
		n += int64(estimateTokens(len(t)))
	}
	return n
}

// embeddingRequests are the embeddings calls an upstream fake received.
func embeddingRequests(f *fakellm.Server) []fakellm.Request {
	var out []fakellm.Request
	for _, r := range f.Requests() {
		if strings.HasSuffix(r.Path, "/embeddings") {
			out = append(out, r)
		}
	}
	return out
}

func sameVector(t *testing.T, got []float64, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("vector of %d dimensions, want %d", len(got), len(want))
	}
	for i := range got {
		if math.Abs(got[i]-float64(want[i])) > 1e-6 {
			t.Fatalf("dimension %d = %v, want %v", i, got[i], want[i])
		}
	}
}

func TestEmbeddingsThroughTheOpenAISDK(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		opts     []envOption
		upstream bool // the env's fake (the credential's upstream) answers, else the fallback
	}{
		{"openai credential", []envOption{withProvider(store.ProviderOpenAI)}, true},
		{"no credential, fallback", []envOption{withProvider(""), withFallback(fakellm.MustParse(okScript))}, false},
		{"anthropic credential only, fallback", []envOption{withFallback(fakellm.MustParse(okScript))}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, fakellm.MustParse(okScript), tt.opts...)
			client := e.openaiSDK(t)
			var hr *http.Response
			resp, err := client.Embeddings.New(context.Background(), embedParams(embedTexts...), option.WithResponseInto(&hr))
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Data) != len(embedTexts) {
				t.Fatalf("%d vectors", len(resp.Data))
			}
			for i, d := range resp.Data {
				if d.Index != int64(i) {
					t.Fatalf("index %d at %d", d.Index, i)
				}
				sameVector(t, d.Embedding, fakellm.Embed(embedTexts[i]))
			}
			want := fakeTokens(embedTexts)
			if resp.Usage.PromptTokens != want || resp.Usage.TotalTokens != want || resp.Model != "text-embedding-test" {
				t.Fatalf("usage = %+v, model %q, want %d tokens", resp.Usage, resp.Model, want)
			}
			reqs := embeddingRequests(e.fake)
			if tt.upstream {
				if len(reqs) != 1 || reqs[0].Path != "/v1/embeddings" || reqs[0].Header.Get("Authorization") != "Bearer sk-test-openai" {
					t.Fatalf("upstream requests = %+v", reqs)
				}
			} else if len(reqs) != 0 {
				t.Fatalf("the credential's upstream got %d embeddings calls", len(reqs))
			}
			rows := e.usageRows(t, 1)
			if len(rows) != 1 {
				t.Fatalf("usage rows = %+v", rows)
			}
			u := rows[0]
			if u.RequestID != hr.Header.Get("request-id") || u.Provider != store.ProviderOpenAI || u.Model != "text-embedding-test" ||
				u.Status != 200 || u.InputTokens != want || u.OutputTokens != 0 || u.Estimated {
				t.Fatalf("usage row = %+v (request-id %s)", u, hr.Header.Get("request-id"))
			}
			labels := map[string]string{"project": "DEMO", "model": "text-embedding-test"}
			if n := e.counter(t, "ballet_llm_tokens_total", map[string]string{"project": "DEMO", "token_type": "input"}); n != float64(want) {
				t.Fatalf("ballet_llm_tokens_total input = %v, want %d", n, want)
			}
			labels["status"] = "200"
			if n := e.counter(t, "ballet_llm_requests_total", labels); n != 1 {
				t.Fatalf("ballet_llm_requests_total = %v", n)
			}
		})
	}
}

func TestEmbeddingsInputForms(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakellm.MustParse(okScript), withProvider(store.ProviderOpenAI))
	t.Run("one string", func(t *testing.T) {
		t.Parallel()
		client := e.openaiSDK(t)
		resp, err := client.Embeddings.New(context.Background(), openai.EmbeddingNewParams{Model: "text-embedding-test",
			Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("sso outage")}})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Data) != 1 {
			t.Fatalf("%d vectors", len(resp.Data))
		}
		sameVector(t, resp.Data[0].Embedding, fakellm.Embed("sso outage"))
	})
	t.Run("base64 and dimensions", func(t *testing.T) {
		t.Parallel()
		resp, body := e.send(t, http.MethodPost, "/v1/embeddings", e.token(t),
			[]byte(`{"model":"text-embedding-test","input":["slow search"],"encoding_format":"base64","dimensions":256}`))
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		var out struct {
			Data []struct {
				Embedding string `json:"embedding"`
			} `json:"data"`
		}
		if err := json.Unmarshal(body, &out); err != nil || len(out.Data) != 1 {
			t.Fatalf("answer: %s", body)
		}
		raw, err := base64.StdEncoding.DecodeString(out.Data[0].Embedding)
		if err != nil || len(raw) != 4*fakellm.Dimensions {
			t.Fatalf("base64 vector: %v (%d bytes)", err, len(raw))
		}
		got := make([]float64, fakellm.Dimensions)
		for i := range got {
			got[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])))
		}
		sameVector(t, got, fakellm.Embed("slow search"))
	})
}

func TestEmbeddingsWithoutUpstreamUsageAreEstimated(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakellm.MustParse(okScript+"embeddings: {omit_usage: true}\n"), withProvider(store.ProviderOpenAI))
	client := e.openaiSDK(t)
	resp, err := client.Embeddings.New(context.Background(), embedParams(embedTexts...))
	if err != nil {
		t.Fatal(err)
	}
	size := 0
	for _, s := range embedTexts {
		size += len(s)
	}
	want := int64(estimateTokens(size))
	if resp.Usage.PromptTokens != want {
		t.Fatalf("usage = %+v, want the estimate %d", resp.Usage, want)
	}
	if u := e.usageRows(t, 1)[0]; u.InputTokens != want || !u.Estimated {
		t.Fatalf("usage row = %+v", u)
	}
}

func TestEmbeddingsUpstreamFailuresAreRetried(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		fail     int
		status   int
		want     int // the status the caller gets
		attempts int
	}{
		{"two 500s then success", 2, 500, 200, 3},
		{"429 then success", 1, 429, 200, 2},
		{"503 past the attempts", 5, 503, 503, 3},
		{"400 is not retried", 5, 400, 400, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, fakellm.MustParse(okScript), withProvider(store.ProviderOpenAI))
			e.fake.FailEmbeddings(tt.fail, tt.status)
			client := e.openaiSDK(t)
			_, err := client.Embeddings.New(context.Background(), embedParams(embedTexts...))
			var oe *openai.Error
			switch {
			case tt.want == 200 && err != nil:
				t.Fatal(err)
			case tt.want != 200 && (!errors.As(err, &oe) || oe.StatusCode != tt.want):
				t.Fatalf("err = %v, want status %d", err, tt.want)
			case oe != nil && (oe.Message != "fake: embeddings fault" || oe.Type != llm.ErrorTypeForStatus(tt.want)):
				t.Fatalf("error = %q type %q", oe.Message, oe.Type)
			}
			if n := len(embeddingRequests(e.fake)); n != tt.attempts {
				t.Fatalf("%d upstream attempts, want %d", n, tt.attempts)
			}
			if n := e.counter(t, "ballet_llm_upstream_retries_total", map[string]string{"provider": "openai"}); n != float64(tt.attempts-1) {
				t.Fatalf("retries = %v, want %d", n, tt.attempts-1)
			}
			u := e.usageRows(t, 1)
			if len(u) != 1 || u[0].Status != tt.want {
				t.Fatalf("usage rows = %+v", u)
			}
			if tokens := u[0].InputTokens; (tt.want == 200) != (tokens == fakeTokens(embedTexts)) || (tt.want != 200 && tokens != 0) {
				t.Fatalf("input tokens = %d", tokens)
			}
		})
	}
}
