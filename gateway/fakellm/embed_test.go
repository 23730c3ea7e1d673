package fakellm_test

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/gateway/fakellm"
)

func cosine(a, b []float32) float64 {
	var dot float64
	for i := range a {
		dot += float64(a[i]) * float64(b[i])
	}
	return dot
}

func TestEmbedIsDeterministicAndNormalised(t *testing.T) {
	t.Parallel()
	for _, text := range []string{"Login fails after the SSO change", "", "   ", "a the of", "ÉTÉ 2026 déploiement", strings.Repeat("word ", 1000)} {
		v := fakellm.Embed(text)
		if len(v) != fakellm.Dimensions {
			t.Fatalf("%q: %d dimensions", text, len(v))
		}
		norm := 0.0
		for _, x := range v {
			norm += float64(x) * float64(x)
		}
		if math.Abs(norm-1) > 1e-5 {
			t.Fatalf("%q: norm² = %v", text, norm)
		}
		if w := fakellm.Embed(text); cosine(v, w) < 1-1e-6 {
			t.Fatalf("%q: two embeddings differ", text)
		}
	}
}

func TestEmbedNearness(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, query, near, far string
	}{
		{"shared word", "checkout button broken", "the checkout page is broken", "weekly team lunch"},
		{"outage concept", "outage of the API", "downtime last night", "invoice totals wrong"},
		{"incident concept", "service unavailable", "major incident review", "new logo colours"},
		{"login concept", "users cannot login", "SSO signin broken", "slow dashboard"},
		{"password concept", "reset password", "authentication rework", "release notes"},
		{"billing concept", "billing is wrong", "refund the charge", "login screen"},
		{"latency concept", "slow pages", "latency spikes", "refund request"},
		{"performance concept", "sluggish editor", "performance budget", "password reset"},
		{"deploy concept", "deploy on Friday", "release checklist", "downtime report"},
		{"rollout concept", "ship the feature", "staged rollout", "invoice export"},
		{"plural", "outages", "outage", "payment"},
		{"case", "LOGIN", "login", "latency"},
		{"stop words do not count", "the login of the user", "a signin", "the invoice of the month"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			q, n, f := fakellm.Embed(tt.query), fakellm.Embed(tt.near), fakellm.Embed(tt.far)
			if cn, cf := cosine(q, n), cosine(q, f); cn <= cf || cn < 0.2 {
				t.Fatalf("cos(%q, %q) = %.3f, cos(%q, %q) = %.3f", tt.query, tt.near, cn, tt.query, tt.far, cf)
			}
		})
	}
}

func TestConceptsHaveTheSharedGroups(t *testing.T) {
	t.Parallel()
	groups := map[string]bool{}
	for _, g := range fakellm.Concepts {
		groups[strings.Join(g, ",")] = true
	}
	for _, want := range []string{
		"outage,downtime,incident,disruption,unavailable", "login,signin,authentication,sso,password",
		"invoice,billing,payment,charge,refund", "slow,latency,sluggish,lag,performance", "deploy,release,rollout,launch,ship",
	} {
		if !groups[want] {
			t.Errorf("no group %s", want)
		}
	}
	seen := map[string]bool{}
	for _, g := range fakellm.Concepts {
		for _, w := range g {
			if seen[w] {
				t.Errorf("%s is in two groups", w)
			}
			seen[w] = true
		}
	}
}

func postJSON(t *testing.T, url, body string) (int, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

func TestEmbeddingsEndpoint(t *testing.T) {
	t.Parallel()
	s := fakellm.New(fakellm.MustParse("answers: [{content: [{text: hi}]}]\nembeddings: {fail_first: 1, status: 503}\n"))
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	// The script's first call fails; then FailEmbeddings adds two more.
	if status, body := postJSON(t, s.URL()+"/v1/embeddings", `{"model":"m","input":"x"}`); status != 503 || !strings.Contains(string(body), "embeddings fault") {
		t.Fatalf("scripted fault: %d %s", status, body)
	}
	s.FailEmbeddings(2, 0)
	for range 2 {
		if status, _ := postJSON(t, s.URL()+"/embeddings", `{"model":"m","input":"x"}`); status != 500 {
			t.Fatalf("FailEmbeddings: status %d", status)
		}
	}
	tests := []struct {
		name, body string
		status     int
		dims       int
		tokens     int64
	}{
		{"string", `{"model":"m","input":"login outage"}`, 200, 256, 3},
		{"array", `{"model":"m","input":["login","outage now"]}`, 200, 256, 2 + 3},
		{"dimensions", `{"model":"m","input":"login","dimensions":64}`, 200, 64, 2},
		{"token ids", `{"model":"m","input":[1,2]}`, 400, 0, 0},
		{"empty item", `{"model":"m","input":["a",""]}`, 400, 0, 0},
		{"no model", `{"input":"a"}`, 400, 0, 0},
		{"too many dimensions", `{"model":"m","input":"a","dimensions":1000}`, 400, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := postJSON(t, s.URL()+"/v1/embeddings", tt.body)
			if status != tt.status {
				t.Fatalf("status = %d, want %d: %s", status, tt.status, body)
			}
			if status != 200 {
				return
			}
			var out struct {
				Object string `json:"object"`
				Data   []struct {
					Index     int       `json:"index"`
					Embedding []float32 `json:"embedding"`
				} `json:"data"`
				Usage struct {
					PromptTokens int64 `json:"prompt_tokens"`
				} `json:"usage"`
			}
			if err := json.Unmarshal(body, &out); err != nil || out.Object != "list" || len(out.Data) == 0 {
				t.Fatalf("answer: %s", body)
			}
			for i, d := range out.Data {
				if d.Index != i || len(d.Embedding) != tt.dims {
					t.Fatalf("data %d: index %d, %d dimensions", i, d.Index, len(d.Embedding))
				}
			}
			if out.Usage.PromptTokens != tt.tokens {
				t.Fatalf("prompt_tokens = %d, want %d", out.Usage.PromptTokens, tt.tokens)
			}
		})
	}
}

func TestCountTokensEndpoint(t *testing.T) {
	t.Parallel()
	s := fakellm.New(fakellm.MustParse("answers: [{content: [{text: hi}]}]"))
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	body := `{"model":"claude-x","messages":[{"role":"user","content":"count me"}]}`
	status, out := postJSON(t, s.URL()+"/v1/messages/count_tokens", body)
	if status != 200 || string(out) != `{"input_tokens":`+jsonN(int64(len(body)+3)/4)+`}` {
		t.Fatalf("%d %s", status, out)
	}
	if status, _ := postJSON(t, s.URL()+"/v1/messages/count_tokens", `{"model":"claude-x"}`); status != 400 {
		t.Fatalf("no messages: %d", status)
	}
}

func jsonN(n int64) string { b, _ := json.Marshal(n); return string(b) }

func TestParseRejectsBadEmbeddings(t *testing.T) {
	t.Parallel()
	for _, src := range []string{
		"answers: [{content: [{text: x}]}]\nembeddings: {fail_first: 1, status: 200}",
		"answers: [{content: [{text: x}]}]\nembeddings: {fail_first: -1}",
		"answers: [{content: [{text: x}]}]\nembeddings: {latency: -1s}",
	} {
		if _, err := fakellm.Parse([]byte(src)); err == nil || !strings.Contains(err.Error(), "fakellm: embeddings:") {
			t.Errorf("%s: err = %v", src, err)
		}
	}
}
