package gateway

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/balletplanner/ballet/gateway/fakellm"
	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/store"
)

// TestEveryRouteIsAuthorisedLikeMessages refuses the same tokens on every
// route, each in its API's error form, before anything reaches an upstream
// or is metered.
func TestEveryRouteIsAuthorisedLikeMessages(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakellm.MustParse(okScript), withProvider(store.ProviderOpenAI))
	e.putCredential(t, e.project, store.ProviderAnthropic, e.fake.URL())
	ctx := context.Background()
	var otherProject string
	if err := e.db.Pool().QueryRow(ctx, `WITH o AS (INSERT INTO organizations (key, name) VALUES ('globex', 'Globex') RETURNING id)
		INSERT INTO projects (organization_id, key, name) SELECT id, 'SECRET', 'Secret' FROM o RETURNING id::text`).Scan(&otherProject); err != nil {
		t.Fatal(err)
	}
	mint := func(p llm.Principal) string {
		tok, err := llm.Mint([]byte(e.cfg.SigningKey), p, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	valid := e.principal()
	noInvoke := valid
	noInvoke.Capabilities = []string{"tracker.read"}
	crossOrg := valid
	crossOrg.Project = otherProject
	wrongKey, err := llm.Mint([]byte("another-key"), valid, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	routes := []struct {
		method, path string
		body         string
		openai       bool // the route answers errors in the OpenAI form
	}{
		{http.MethodPost, "/v1/messages", `{"model":"claude-test","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`, false},
		{http.MethodPost, "/v1/messages/count_tokens", `{"model":"claude-test","messages":[{"role":"user","content":"hi"}]}`, false},
		{http.MethodGet, "/v1/models", "", false},
		{http.MethodGet, "/v1/models/gpt-4.1", "", false},
		{http.MethodPost, "/v1/embeddings", `{"model":"text-embedding-test","input":"hi"}`, true},
	}
	tokens := []struct {
		name   string
		token  string
		status int
		typ    string
		want   string
	}{
		{"no token", "", 401, llm.ErrAuthentication, "missing gateway token"},
		{"garbage", "not-a-token", 401, llm.ErrAuthentication, "invalid gateway token"},
		{"wrong key", wrongKey, 401, llm.ErrAuthentication, "invalid gateway token"},
		{"no llm.invoke", mint(noInvoke), 403, llm.ErrPermission, "the token lacks the llm.invoke capability"},
		{"another organization's project", mint(crossOrg), 403, llm.ErrPermission, "the token's organization or project does not exist"},
		{"valid", mint(valid), 200, "", ""},
	}
	for _, rt := range routes {
		for _, tk := range tokens {
			t.Run(rt.path+"/"+tk.name, func(t *testing.T) {
				t.Parallel()
				var body []byte
				if rt.body != "" {
					body = []byte(rt.body)
				}
				resp, out := e.send(t, rt.method, rt.path, tk.token, body)
				if resp.StatusCode != tk.status {
					t.Fatalf("status = %d, want %d: %s", resp.StatusCode, tk.status, out)
				}
				if resp.Header.Get("request-id") == "" {
					t.Fatal("no request-id")
				}
				if tk.status == 200 {
					return
				}
				var typ, msg string
				if rt.openai {
					typ, _, msg = openaiErrorOf(t, out)
				} else {
					d := errorOf(t, out)
					typ, msg = d.Type, d.Message
				}
				if typ != tk.typ {
					t.Fatalf("type = %s, want %s", typ, tk.typ)
				}
				mustContain(t, msg, tk.want)
			})
		}
	}
	t.Cleanup(func() {
		// Only the valid calls reached the upstream: a message, a count, an embedding.
		if n := len(e.fake.Requests()); n != 3 {
			t.Errorf("the upstream got %d calls, want 3", n)
		}
		if rows := e.usageRows(t, 2); len(rows) != 2 {
			t.Errorf("usage rows = %+v, want the message's and the embedding's", rows)
		}
	})
}
