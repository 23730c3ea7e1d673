package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/gateway/fakellm"
	"github.com/balletplanner/ballet/store"
)

// ambiguousBodies are Messages API bodies that JSON parsers read in more
// than one way (a name twice, a name in another case or spelling): the
// gateway must refuse each, naming the member, before any upstream sees it.
// @model stands for the model of the route's provider.
var ambiguousBodies = []struct {
	name, body, member string
}{
	{"case variant after the member", `{"model":"@model","max_tokens":100000,"messages":[{"role":"user","content":"hi"}],"MAX_TOKENS":1}`, `"MAX_TOKENS"`},
	{"case variant before the member", `{"MAX_TOKENS":1,"model":"@model","max_tokens":100000,"messages":[{"role":"user","content":"hi"}]}`, `"MAX_TOKENS"`},
	{"case variant alone", `{"model":"@model","Max_Tokens":100000,"messages":[{"role":"user","content":"hi"}]}`, `"Max_Tokens"`},
	{"camel case", `{"model":"@model","max_tokens":100000,"maxTokens":1,"messages":[{"role":"user","content":"hi"}]}`, `"maxTokens"`},
	{"unicode case fold", `{"model":"@model","max_tokens":100000,"max_to\u212aens":1,"messages":[{"role":"user","content":"hi"}]}`, "max_to\u212aens"},
	{"duplicate max_tokens", `{"model":"@model","max_tokens":100000,"messages":[{"role":"user","content":"hi"}],"max_tokens":1}`, `"max_tokens"`},
	{"escaped duplicate", `{"model":"@model","max_tokens":100000,"messages":[{"role":"user","content":"hi"}],"max\u005ftokens":1}`, `"max_tokens"`},
	{"duplicate model", `{"model":"claude-cheap","max_tokens":10,"messages":[{"role":"user","content":"hi"}],"model":"@model"}`, `"model"`},
	{"duplicate stream", `{"model":"@model","max_tokens":10,"stream":false,"messages":[{"role":"user","content":"hi"}],"stream":true}`, `"stream"`},
	{"case variant of model", `{"model":"@model","max_tokens":10,"MODEL":"claude-other","messages":[{"role":"user","content":"hi"}]}`, `"MODEL"`},
	{"nested duplicate", `{"model":"@model","max_tokens":10,"messages":[{"role":"user","role":"assistant","content":"hi"}]}`, `"role"`},
	{"deep duplicate", `{"model":"@model","max_tokens":10,"messages":[{"role":"user","content":[{"type":"text","text":"a","text":"b"}]}]}`, `"text"`},
}

// TestAmbiguousBodiesAreRefused sends each ambiguous body to the Messages
// route of an Anthropic and an OpenAI upstream and to count_tokens: each is
// refused with 400 invalid_request_error naming the member, and no
// upstream request is made.
func TestAmbiguousBodiesAreRefused(t *testing.T) {
	t.Parallel()
	anthropic := newEnv(t, fakellm.MustParse(okScript))
	openai := newEnv(t, fakellm.MustParse(okScript), withProvider(store.ProviderOpenAI))
	routes := []struct {
		name, path, model string
		e                 *env
	}{
		{"anthropic", "/v1/messages", "claude-test", anthropic},
		{"openai", "/v1/messages", "gpt-test", openai},
		{"count_tokens", "/v1/messages/count_tokens", "claude-test", anthropic},
	}
	t.Run("bodies", func(t *testing.T) {
		for _, r := range routes {
			token := r.e.token(t)
			for _, tt := range ambiguousBodies {
				t.Run(r.name+"/"+tt.name, func(t *testing.T) {
					t.Parallel()
					body := strings.ReplaceAll(tt.body, "@model", r.model)
					resp, out := r.e.send(t, http.MethodPost, r.path, token, []byte(body))
					if resp.StatusCode != http.StatusBadRequest {
						t.Fatalf("status = %d, want 400: %s", resp.StatusCode, out)
					}
					d := errorOf(t, out)
					if d.Type != "invalid_request_error" {
						t.Fatalf("type = %s: %s", d.Type, out)
					}
					mustContain(t, d.Message, tt.member)
				})
			}
		}
	})
	for _, e := range []*env{anthropic, openai} {
		if n := len(e.fake.Requests()); n != 0 {
			t.Fatalf("%d ambiguous bodies reached the upstream", n)
		}
	}
}

// TestForwardedBodyIsTheBodyChecked: an Anthropic upstream gets the very
// bytes the gateway read, odd but unambiguous spellings included; an
// OpenAI upstream gets the max_tokens, model and stream the gateway read.
func TestForwardedBodyIsTheBodyChecked(t *testing.T) {
	t.Parallel()
	body := []byte(" {\"model\" : \"claude-test\", \"max\\u005ftokens\":77,\"service_tier\":\"auto\",\n" +
		"\"messages\":[{\"role\":\"user\",\"content\":\"h\u00e9llo \\u00e9\"}], \"stream\" :false } ")
	tests := []struct {
		name     string
		provider string
		check    func(t *testing.T, got []byte)
	}{
		{"anthropic", store.ProviderAnthropic, func(t *testing.T, got []byte) {
			if !bytes.Equal(got, body) {
				t.Fatalf("upstream got %q, want the body checked %q", got, body)
			}
		}},
		{"openai", store.ProviderOpenAI, func(t *testing.T, got []byte) {
			var oa struct {
				Model     string `json:"model"`
				MaxTokens int    `json:"max_tokens"`
				Stream    bool   `json:"stream"`
			}
			if err := json.Unmarshal(got, &oa); err != nil || oa.Model != "claude-test" || oa.MaxTokens != 77 || oa.Stream {
				t.Fatalf("upstream got %s (%v), want model claude-test, max_tokens 77, no stream", got, err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, fakellm.MustParse(okScript), withProvider(tt.provider))
			// A budget: the reservation is made on what the gateway read.
			if _, err := e.db.PutLimits(context.Background(), store.Limits{OrganizationID: e.org, ProjectID: e.project,
				TokenBudget: int64p(1_000_000), BudgetPeriod: store.BudgetDay, UpdatedBy: "alice"}); err != nil {
				t.Fatal(err)
			}
			resp, out := e.post(t, e.token(t), body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status = %d: %s", resp.StatusCode, out)
			}
			reqs := e.fake.Requests()
			if len(reqs) != 1 {
				t.Fatalf("%d upstream requests, want 1", len(reqs))
			}
			tt.check(t, reqs[0].Body)
		})
	}
}

// TestReadRequestHead: the head of a body every parser reads one way is
// read; any other body is refused with an error naming what is wrong.
func TestReadRequestHead(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		body string
		want requestHead
		err  string // "" when the body is read
	}{
		{"everyday", `{"model":"claude-x","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hello \"you\" \u00e9"}]}`,
			requestHead{Model: "claude-x", MaxTokens: 100, Stream: true, Messages: true}, ""},
		{"any order, space, other members", ` {"messages":[],"system":"s","max_tokens":5,"model":"claude-x","stream":false,"tools":[{"name":"t","input_schema":{"type":"object"}}],"temperature":0.5,"metadata":null,"betas_to_come":{"x":1}} `,
			requestHead{Model: "claude-x", MaxTokens: 5, Messages: true}, ""},
		{"escaped names and values", `{"mod\u0065l":"claude-\u0078","max\u005ftokens":7}`, requestHead{Model: "claude-x", MaxTokens: 7}, ""},
		{"nulls read as absent", `{"model":null,"max_tokens":null,"stream":null,"messages":null}`, requestHead{}, ""},
		{"same name in different objects", `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],"metadata":{"model":"x"}}`,
			requestHead{Model: "m", Messages: true}, ""},
		{"names differing in case below the top", `{"model":"m","metadata":{"user_id":"a","USER_ID":"b"}}`, requestHead{Model: "m"}, ""},
		{"empty object", `{}`, requestHead{}, ""},

		{"duplicate", `{"model":"a","model":"b"}`, requestHead{}, `member "model" appears twice`},
		{"escaped duplicate", `{"max_tokens":1,"max\u005ftokens":2}`, requestHead{}, `member "max_tokens" appears twice`},
		{"nested duplicate", `{"messages":[{"role":"user","role":"assistant"}]}`, requestHead{}, `member "role" appears twice in /messages/0`},
		{"case variant", `{"model":"a","MODEL":"b"}`, requestHead{}, `unknown member "MODEL"`},
		{"spelling variant", `{"max-tokens":1}`, requestHead{}, `unknown member "max-tokens"`},
		{"case variant of a member the gateway does not read", `{"Temperature":1}`, requestHead{}, `unknown member "Temperature"`},
		{"fraction", `{"max_tokens":1.5}`, requestHead{}, "max_tokens: must be an integer"},
		{"exponent", `{"max_tokens":1e3}`, requestHead{}, "max_tokens: must be an integer"},
		{"string max_tokens", `{"max_tokens":"1"}`, requestHead{}, "max_tokens: must be an integer"},
		{"huge max_tokens", `{"max_tokens":9223372036854775807}`, requestHead{}, "max_tokens: must be an integer of at most 2147483647"},
		{"model not a string", `{"model":["a"]}`, requestHead{}, "model: must be a string"},
		{"stream not a boolean", `{"stream":"true"}`, requestHead{}, "stream: must be true or false"},
		{"invalid UTF-8", "{\"model\":\"a\xff\"}", requestHead{}, "body: "},
		{"lone surrogate", `{"model":"a\ud800"}`, requestHead{}, "body: "},
		{"not an object", `[]`, requestHead{}, "body: must be a JSON object"},
		{"two values", `{} {}`, requestHead{}, "body: more JSON after the object"},
		{"trailing garbage", `{"model":"x"}}`, requestHead{}, "body: "},
		{"cut short", `{"model":"x"`, requestHead{}, "body: "},
		{"empty", ``, requestHead{}, "body: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := readRequestHead([]byte(tt.body))
			switch {
			case tt.err == "" && err != nil:
				t.Fatalf("%s: %v", tt.body, err)
			case tt.err == "" && got != tt.want:
				t.Fatalf("%s: read %+v, want %+v", tt.body, got, tt.want)
			case tt.err != "" && err == nil:
				t.Fatalf("%s: read %+v, want an error", tt.body, got)
			case tt.err != "":
				mustContain(t, err.Error(), tt.err)
			}
		})
	}
}

func FuzzReadRequestHead(f *testing.F) {
	f.Add([]byte(`{"model":"claude-x","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hello"}]}`))
	f.Add([]byte(`{"Model":"a","max_tokens":1e3,"stream":null}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		head, err := readRequestHead(body)
		if err != nil {
			return
		}
		// What is read, every parser reads: encoding/json (case-insensitive,
		// the last duplicate wins) agrees on every body read.
		var loose struct {
			Model     *string `json:"model"`
			MaxTokens *int64  `json:"max_tokens"`
			Stream    *bool   `json:"stream"`
		}
		if err := json.Unmarshal(body, &loose); err != nil {
			t.Fatalf("%q: read %+v, encoding/json fails: %v", body, head, err)
		}
		if deref(loose.Model) != head.Model || deref(loose.MaxTokens) != head.MaxTokens || deref(loose.Stream) != head.Stream {
			t.Fatalf("%q: read %+v, encoding/json reads %v %v %v", body, head, deref(loose.Model), deref(loose.MaxTokens), deref(loose.Stream))
		}
	})
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
