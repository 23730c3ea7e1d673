package api_test

import (
	"context"
	"fmt"
	"testing"
)

// allowlistsSnapshot sums up the model_allowlists table, to show that a
// refusal wrote nothing.
func allowlistsSnapshot(t *testing.T, e *env) string {
	t.Helper()
	var s string
	err := e.db.Pool().QueryRow(context.Background(), `SELECT count(*)::text || '|' ||
		COALESCE(string_agg(array_to_string(models, ',') || ':' || updated_at::text, ';' ORDER BY updated_at), '')
		FROM model_allowlists`).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestModelAllowlistsREST(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	org, proj := "/api/v1/organizations/acme/models", "/api/v1/projects/WEB/models"

	// Nothing stored: every model, for both scopes.
	r := e.do("GET", proj, "viewer", nil).expect(t, 200)
	if got := fmt.Sprintf("%v %v %v", r.Body["models"], r.Body["organization_models"], r.Body["updated_by"]); got != "[] [] <nil>" {
		t.Errorf("GET project %s", r.Raw)
	}

	long := make([]byte, 129)
	for i := range long {
		long[i] = 'm'
	}
	refusals := []tenancyCall{
		{"no token", "PUT", org, "", map[string]any{"models": []string{"m"}}, 401, "unauthenticated", ""},
		{"viewer", "PUT", org, "viewer", map[string]any{"models": []string{"m"}}, 403, "forbidden", "credential.manage"},
		{"engineer", "PUT", proj, "engineer", map[string]any{"models": []string{"m"}}, 403, "forbidden", "credential.manage"},
		{"outsider", "PUT", org, "outsider", map[string]any{"models": []string{"m"}}, 404, "not_found", "acme"},
		{"other organization's project", "PUT", "/api/v1/projects/GLX/models", "admin", map[string]any{"models": []string{"m"}}, 404, "not_found", "GLX"},
		{"no models", "PUT", org, "admin", `{}`, 400, "invalid_argument", "models: field required"},
		{"not a list", "PUT", org, "admin", `{"models":"claude"}`, 400, "invalid_argument", "models"},
		{"empty name", "PUT", proj, "admin", map[string]any{"models": []string{"claude-a", ""}}, 400, "invalid_argument", `models[1]: must be a model name`},
		{"space", "PUT", proj, "admin", map[string]any{"models": []string{"claude a"}}, 400, "invalid_argument", `models[0]: must be a model name`},
		{"too long", "PUT", proj, "admin", map[string]any{"models": []string{string(long)}}, 400, "invalid_argument", `models[0]: must be a model name of 1-128`},
		{"unknown field", "PUT", proj, "admin", `{"models":[],"deny":[]}`, 400, "invalid_argument", `unknown field "deny"`},
		{"delete nothing", "DELETE", proj, "admin", nil, 404, "not_found", "no model allow-list is stored for project WEB"},
	}
	empty := allowlistsSnapshot(t, e)
	for _, c := range refusals {
		t.Run(c.name, func(t *testing.T) {
			e.runCalls(t, []tenancyCall{c})
			if got := allowlistsSnapshot(t, e); got != empty {
				t.Fatalf("a refusal wrote an allow-list: %s", got)
			}
		})
	}

	r = e.do("PUT", org, "admin", map[string]any{"models": []string{"claude-a", "claude-b", "claude-a"}}).expect(t, 200)
	if got := fmt.Sprintf("%v %v %v", r.Body["scope"], r.Body["models"], r.Body["updated_by"]); got != "organization [claude-a claude-b] admin@example.com" {
		t.Errorf("PUT org %s", r.Raw)
	}
	r = e.do("PUT", proj, "platform", map[string]any{"models": []string{"claude-b"}}).expect(t, 200)
	if got := fmt.Sprintf("%v %v %v %v", r.Body["scope"], r.Body["project"], r.Body["models"], r.Body["organization_models"]); got != "project WEB [claude-b] [claude-a claude-b]" {
		t.Errorf("PUT project %s", r.Raw)
	}
	rule, err := e.db.EffectiveModelRule(context.Background(), e.org.ID, e.project.ID)
	if err != nil {
		t.Fatal(err)
	}
	for model, want := range map[string]bool{"claude-a": false, "claude-b": true, "claude-c": false} {
		if rule.Allows(model) != want {
			t.Errorf("project allows %s: %v, want %v", model, !want, want)
		}
	}
	// Another organization's lists are its own.
	r = e.do("GET", "/api/v1/organizations/globex/models", "outsider", nil).expect(t, 200)
	if fmt.Sprint(r.Body["models"]) != "[]" {
		t.Errorf("globex %s", r.Raw)
	}
	// An empty list is every model; delete removes the list.
	e.do("PUT", proj, "admin", map[string]any{"models": []string{}}).expect(t, 200)
	e.do("DELETE", proj, "admin", nil).expect(t, 204)
	e.do("DELETE", org, "admin", nil).expect(t, 204)
	if n := e.countRows(t, "model_allowlists"); n != 0 {
		t.Errorf("%d allow-list rows, want 0", n)
	}
}
