package api_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/balletplanner/ballet/api"
	"github.com/balletplanner/ballet/gateway"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tasks"
	"github.com/balletplanner/ballet/tasks/taskstest"
)

// depsOption adjusts the Deps of a restarted api; ns is its Redis namespace.
type depsOption func(t *testing.T, d *api.Deps, ns string)

// withSealer gives the api a credentials sealer.
func withSealer(s api.CredentialSealer) depsOption {
	return func(_ *testing.T, d *api.Deps, _ string) { d.Sealer = s }
}

// withPlanner gives the api a planner, which adds the planner routes. No
// worker runs: sent turns stay queued.
func withPlanner() depsOption {
	return func(t *testing.T, d *api.Deps, ns string) {
		names := tasks.Names{Namespace: ns}
		q := tasks.NewQueue(d.Redis, names, time.Minute)
		t.Cleanup(q.Close)
		d.Planner = tasks.NewPlanner(d.DB, q, tasks.NewPublisher(d.Redis, names, d.Log), store.QueueLimits{Total: 1000, PerProject: 1000}, d.Log)
	}
}

// restart replaces e's api with one on the same database and tokens whose
// Deps the options adjust; newEnv's own api keeps running, unused.
func (e *env) restart(t *testing.T, opts ...depsOption) {
	t.Helper()
	e.restartWith(t, nil, opts...)
}

// restartWith is restart with the server settings edit changes.
func (e *env) restartWith(t *testing.T, edit func(*api.Config), opts ...depsOption) {
	t.Helper()
	rdb, rc := taskstest.New(t)
	cfg := api.DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	if edit != nil {
		edit(&cfg)
	}
	d := api.Deps{DB: e.db, Redis: rdb, Registry: prometheus.NewRegistry(), Version: "test", RedisNamespace: rc.Namespace}
	for _, o := range opts {
		o(t, &d, rc.Namespace)
	}
	srv, err := api.New(cfg, api.DefaultAuthConfig(), d)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	e.srv = srv
}

// testSealer is a gateway sealer on a random key.
func testSealer(t *testing.T) *gateway.Sealer {
	t.Helper()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	s, err := gateway.NewSealer(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// credentialSnapshot sums up the credentials table, to show that a refusal
// wrote nothing.
func credentialSnapshot(t *testing.T, e *env) string {
	t.Helper()
	var s string
	err := e.db.Pool().QueryRow(context.Background(), `SELECT count(*)::text || '|' ||
		COALESCE(string_agg(provider || ':' || fingerprint || ':' || COALESCE(base_url, '') || ':' || updated_at::text, ',' ORDER BY id), '')
		FROM credentials`).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// assertNoPlaintext fails when a secret appears anywhere in the stored
// credentials (raw, hex or as text) or in the event log.
func assertNoPlaintext(t *testing.T, e *env, secrets ...string) {
	t.Helper()
	ctx := context.Background()
	rows, err := e.db.Pool().Query(ctx, `SELECT ciphertext, nonce, row_to_json(c)::text FROM credentials c`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var ct, nonce []byte
		var text string
		if err := rows.Scan(&ct, &nonce, &text); err != nil {
			t.Fatal(err)
		}
		for _, s := range secrets {
			if bytes.Contains(ct, []byte(s)) || bytes.Contains(nonce, []byte(s)) ||
				strings.Contains(text, s) || strings.Contains(text, hex.EncodeToString([]byte(s))) {
				t.Fatalf("secret %q stored in plaintext: %s", s, text)
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets {
		var n int
		if err := e.db.Pool().QueryRow(ctx, `SELECT count(*) FROM events WHERE payload::text LIKE '%' || $1 || '%'`, s).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			t.Fatalf("secret %q in the event log", s)
		}
	}
}

func TestCredentialsREST(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sealer := testSealer(t)
	e.restart(t, withSealer(sealer))
	const (
		orgKey  = "sk-ant-org-0123456789abcdef"
		projKey = "sk-proj-openai-fedcba9876543210"
		other   = "sk-ant-other-55555"
	)
	secrets := []string{orgKey, projKey, other}
	orgPath := "/api/v1/organizations/acme/credentials/"
	projPath := "/api/v1/projects/WEB/credentials/"
	type call struct {
		name         string
		method, path string
		who          string
		body         any
		status       int
		code         string
		message      string
	}
	calls := []call{
		// Refusals first: nothing may be written by any of them.
		{"no token", "PUT", orgPath + "anthropic", "", map[string]any{"api_key": orgKey}, 401, "unauthenticated", ""},
		{"viewer org", "PUT", orgPath + "anthropic", "viewer", map[string]any{"api_key": orgKey}, 403, "forbidden", "credential.manage"},
		{"engineer org", "PUT", orgPath + "anthropic", "engineer", map[string]any{"api_key": orgKey}, 403, "forbidden", "credential.manage"},
		{"approver project", "PUT", projPath + "openai", "approver", map[string]any{"api_key": projKey}, 403, "forbidden", "credential.manage"},
		{"engineer project", "PUT", projPath + "openai", "engineer", map[string]any{"api_key": projKey}, 403, "forbidden", "credential.manage"},
		{"outsider org", "PUT", orgPath + "anthropic", "outsider", map[string]any{"api_key": orgKey}, 404, "not_found", "acme"},
		{"outsider project", "PUT", projPath + "openai", "outsider", map[string]any{"api_key": projKey}, 404, "not_found", "WEB"},
		{"outsider delete", "DELETE", orgPath + "anthropic", "outsider", nil, 404, "not_found", ""},
		{"outsider list", "GET", "/api/v1/organizations/acme/credentials", "outsider", nil, 404, "not_found", ""},
		{"viewer list", "GET", "/api/v1/projects/WEB/credentials", "viewer", nil, 403, "forbidden", "credential.manage"},
		{"unknown org", "PUT", "/api/v1/organizations/nope/credentials/anthropic", "admin", map[string]any{"api_key": orgKey}, 404, "not_found", "nope"},
		{"bad provider", "PUT", orgPath + "gemini", "admin", map[string]any{"api_key": orgKey}, 400, "invalid_argument", `provider: must be anthropic or openai, got "gemini"`},
		{"bad provider project", "PUT", projPath + "Anthropic", "admin", map[string]any{"api_key": orgKey}, 400, "invalid_argument", "provider"},
		{"bad provider delete", "DELETE", orgPath + "gemini", "admin", nil, 400, "invalid_argument", "provider"},
		{"unknown field", "PUT", orgPath + "anthropic", "admin", `{"api_key":"` + orgKey + `","apikey":"x"}`, 400, "invalid_argument", `unknown field "apikey"`},
		{"wrong type", "PUT", orgPath + "anthropic", "admin", `{"api_key":12345}`, 400, "invalid_argument", "field api_key: must be a string"},
		{"no body", "PUT", orgPath + "anthropic", "admin", nil, 400, "invalid_argument", "request body"},
		{"missing key", "PUT", orgPath + "anthropic", "admin", map[string]any{"base_url": "https://api.example.com"}, 400, "invalid_argument", "api_key: required"},
		{"key with newline", "PUT", orgPath + "anthropic", "admin", map[string]any{"api_key": orgKey + "\n"}, 400, "invalid_argument", "api_key: must not contain whitespace"},
		{"key too long", "PUT", orgPath + "anthropic", "admin", map[string]any{"api_key": strings.Repeat("k", 4097)}, 400, "invalid_argument", "api_key: at most 4096"},
		{"base_url not http", "PUT", projPath + "openai", "admin", map[string]any{"api_key": projKey, "base_url": "ftp://llm.local"}, 400, "invalid_argument", "base_url: must be an absolute http"},
		{"base_url relative", "PUT", projPath + "openai", "admin", map[string]any{"api_key": projKey, "base_url": "/v1"}, 400, "invalid_argument", "base_url"},
		{"base_url with password", "PUT", projPath + "openai", "admin", map[string]any{"api_key": projKey, "base_url": "https://u:p@llm.local"}, 400, "invalid_argument", "base_url: must not carry a user"},
		{"base_url with query", "PUT", projPath + "openai", "admin", map[string]any{"api_key": projKey, "base_url": "https://llm.local/v1?key=x"}, 400, "invalid_argument", "base_url: must not have a query"},
		{"delete missing", "DELETE", orgPath + "openai", "admin", nil, 404, "not_found", "no openai credential is stored for organization acme"},
		{"other org's project via acme admin", "PUT", "/api/v1/projects/GLX/credentials/openai", "admin", map[string]any{"api_key": other}, 404, "not_found", "GLX"},
	}
	empty := credentialSnapshot(t, e)
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			r := e.do(c.method, c.path, c.who, c.body).expect(t, c.status)
			if c.code != "" && r.errorCode() != c.code {
				t.Errorf("error %q, want %q; body %s", r.errorCode(), c.code, r.Raw)
			}
			if !strings.Contains(r.message(), c.message) {
				t.Errorf("message %q does not contain %q", r.message(), c.message)
			}
			for _, s := range secrets {
				if strings.Contains(string(r.Raw), s) {
					t.Errorf("reply repeats the key: %s", r.Raw)
				}
			}
			if got := credentialSnapshot(t, e); got != empty {
				t.Errorf("a refusal wrote credentials: %s", got)
			}
		})
	}

	// Writes that succeed.
	put := func(path, who string, body map[string]any) response {
		t.Helper()
		r := e.do("PUT", path, who, body).expect(t, 200)
		for _, s := range secrets {
			if strings.Contains(string(r.Raw), s) {
				t.Fatalf("reply repeats the key: %s", r.Raw)
			}
		}
		if _, ok := r.Body["api_key"]; ok {
			t.Fatalf("reply has api_key: %s", r.Raw)
		}
		return r
	}
	r := put(orgPath+"anthropic", "admin", map[string]any{"api_key": orgKey})
	want := map[string]any{"provider": "anthropic", "scope": "organization", "organization": "acme",
		"fingerprint": gateway.Fingerprint([]byte(orgKey)), "base_url": nil, "updated_by": "admin@example.com"}
	for k, v := range want {
		if r.Body[k] != v {
			t.Errorf("%s = %v, want %v; body %s", k, r.Body[k], v, r.Raw)
		}
	}
	r = put(projPath+"openai", "platform", map[string]any{"api_key": projKey, "base_url": "HTTP://localhost:11434/v1"})
	if r.Body["scope"] != "project" || r.Body["project"] != "WEB" || r.Body["base_url"] != "http://localhost:11434/v1" ||
		r.Body["fingerprint"] != gateway.Fingerprint([]byte(projKey)) {
		t.Errorf("project credential reply %s", r.Raw)
	}
	assertNoPlaintext(t, e, secrets...)

	// The stored form opens to the key with the sealer's key, and only so.
	ctx := context.Background()
	stored, err := e.db.GetCredential(ctx, e.org.ID, "", "anthropic")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := sealer.OpenCredential(stored); err != nil || got != orgKey {
		t.Fatalf("open stored credential = %q, %v", got, err)
	}
	if _, err := testSealer(t).OpenCredential(stored); err == nil {
		t.Fatal("another key opened the credential")
	}

	// Replacing keeps one row and changes the fingerprint.
	before := e.countRows(t, "credentials")
	r = put(orgPath+"anthropic", "admin", map[string]any{"api_key": other})
	if r.Body["fingerprint"] != gateway.Fingerprint([]byte(other)) {
		t.Errorf("fingerprint after replace %v", r.Body["fingerprint"])
	}
	if n := e.countRows(t, "credentials"); n != before {
		t.Errorf("replace: %d rows, want %d", n, before)
	}
	assertNoPlaintext(t, e, secrets...)

	// Lists: the organization's defaults; a project's overrides then the defaults.
	r = e.do("GET", "/api/v1/organizations/acme/credentials", "admin", nil).expect(t, 200)
	if got := fmt.Sprint(credentialList(r)); got != "[anthropic/organization]" {
		t.Errorf("organization list %s; body %s", got, r.Raw)
	}
	r = e.do("GET", "/api/v1/projects/WEB/credentials", "admin", nil).expect(t, 200)
	if got := fmt.Sprint(credentialList(r)); got != "[openai/project anthropic/organization]" {
		t.Errorf("project list %s; body %s", got, r.Raw)
	}
	for _, s := range secrets {
		if strings.Contains(string(r.Raw), s) {
			t.Fatalf("list repeats a key: %s", r.Raw)
		}
	}
	// Another organization sees none of it.
	r = e.do("GET", "/api/v1/organizations/globex/credentials", "outsider", nil).expect(t, 200)
	if got := credentialList(r); len(got) != 0 {
		t.Errorf("globex list %v", got)
	}

	// Delete: the project's override, then nothing left to delete.
	e.do("DELETE", projPath+"openai", "admin", nil).expect(t, 204)
	r = e.do("DELETE", projPath+"openai", "admin", nil).expect(t, 404)
	if !strings.Contains(r.message(), "no openai credential is stored for project WEB") {
		t.Errorf("message %q", r.message())
	}
	if n := e.countRows(t, "credentials"); n != 1 {
		t.Errorf("%d credentials after delete, want 1", n)
	}
}

// credentialList lists "provider/scope" of a credentials list reply.
func credentialList(r response) []string {
	items, _ := r.Body["items"].([]any)
	out := []string{}
	for _, it := range items {
		m := it.(map[string]any)
		out = append(out, fmt.Sprint(m["provider"], "/", m["scope"]))
	}
	return out
}

func TestCredentialsWithoutKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		sealer api.CredentialSealer
	}{
		{"nil", nil},
		{"typed nil", (*gateway.Sealer)(nil)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.restart(t, withSealer(tt.sealer))
			for _, path := range []string{"/api/v1/organizations/acme/credentials/anthropic", "/api/v1/projects/WEB/credentials/openai"} {
				r := e.do("PUT", path, "admin", map[string]any{"api_key": "sk-secret-1"}).expect(t, 500)
				if r.errorCode() != "internal" || !strings.Contains(r.message(), "gateway.credentials_key") {
					t.Errorf("reply %s", r.Raw)
				}
				if strings.Contains(string(r.Raw), "sk-secret-1") {
					t.Errorf("reply repeats the key: %s", r.Raw)
				}
			}
			// Permission and tenancy are still checked first.
			e.do("PUT", "/api/v1/organizations/acme/credentials/anthropic", "viewer", map[string]any{"api_key": "k"}).expect(t, 403)
			e.do("PUT", "/api/v1/organizations/acme/credentials/anthropic", "outsider", map[string]any{"api_key": "k"}).expect(t, 404)
			if n := e.countRows(t, "credentials"); n != 0 {
				t.Errorf("%d credentials stored without a key", n)
			}
			// Listing and deleting need no key.
			e.do("GET", "/api/v1/organizations/acme/credentials", "admin", nil).expect(t, 200)
			e.do("DELETE", "/api/v1/organizations/acme/credentials/anthropic", "admin", nil).expect(t, 404)
		})
	}
}
