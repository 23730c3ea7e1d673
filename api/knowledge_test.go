package api_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
)

// kbItem inserts a ticket with plain SQL; items belong to the tracker.
func (e *env) kbItem(t *testing.T, projectID, projectKey string, number int, title string) {
	t.Helper()
	_, err := e.db.Pool().Exec(context.Background(), `
		INSERT INTO items (project_id, number, key, kind, title, description, state, type, review_mode, merge_mode, created_by)
		VALUES ($1, $2, $3, 'ticket', $4, 'About '||$4, 'backlog', 'feature', 'agent', 'auto', 'test')`,
		projectID, number, projectKey+"-"+strconv.Itoa(number), title)
	if err != nil {
		t.Fatal(err)
	}
}

func TestKnowledgeREST(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.kbItem(t, e.project.ID, "WEB", 1, "Login page")
	base := "/api/v1/organizations/acme/knowledge/entries"
	r := e.do("POST", base, "engineer", map[string]any{"kind": "decision", "title": "Use OIDC",
		"body": "We use **OIDC**.", "projects": []string{"WEB"}, "items": []string{"WEB-1"}}).expect(t, 201)
	id, _ := r.Body["id"].(string)
	if r.Body["version"] != 1.0 || r.Body["created_by"] != "engineer@example.com" || r.Body["updated_by"] != "engineer@example.com" {
		t.Fatalf("created %s", r.Raw)
	}
	e.do("POST", base, "admin", map[string]any{"kind": "note", "title": "Lunch", "body": "Fridays"}).expect(t, 201)
	if r := e.do("GET", base+"/"+id, "viewer", nil).expect(t, 200); r.Body["title"] != "Use OIDC" {
		t.Fatalf("get %s", r.Raw)
	}
	for query, n := range map[string]int{"": 2, "?kind=decision": 1, "?project=WEB": 1, "?item=WEB-1": 1, "?kind=debt": 0, "?limit=1": 1} {
		if got := e.do("GET", base+query, "viewer", nil).expect(t, 200).kbList(t); len(got) != n {
			t.Errorf("GET entries%s: %d, want %d", query, len(got), n)
		}
	}
	r = e.do("PATCH", base+"/"+id, "admin", map[string]any{"version": 1, "title": "Use OIDC everywhere"}).expect(t, 200)
	if r.Body["version"] != 2.0 || r.Body["updated_by"] != "admin@example.com" || r.Body["created_by"] != "engineer@example.com" {
		t.Fatalf("patched %s", r.Raw)
	}
	r = e.do("PATCH", base+"/"+id, "engineer", map[string]any{"version": 1, "body": "stale"}).expect(t, 409)
	details, _ := r.Body["details"].(map[string]any)
	if r.errorCode() != "conflict" || details["current_version"] != 2.0 || !strings.Contains(r.message(), "version 2") {
		t.Fatalf("stale patch %s", r.Raw)
	}
	vs := e.do("GET", base+"/"+id+"/versions", "viewer", nil).expect(t, 200).kbList(t)
	if len(vs) != 2 || vs[0]["version"] != 2.0 || vs[1]["title"] != "Use OIDC" {
		t.Fatalf("versions %v", vs)
	}
	if r := e.do("GET", base+"/"+id+"/versions/1", "viewer", nil).expect(t, 200); r.Body["body"] != "We use **OIDC**." {
		t.Fatalf("version 1 %s", r.Raw)
	}
	e.do("GET", base+"/"+id+"/versions/3", "viewer", nil).expect(t, 404)
	if n := e.kbCount(t, `SELECT count(*) FROM events WHERE type IN ('knowledge.created', 'knowledge.updated')`); n != 3 {
		t.Fatalf("knowledge events = %d, want 3", n)
	}
}

func TestKnowledgeRESTRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	base := "/api/v1/organizations/acme/knowledge/entries"
	r := e.do("POST", base, "admin", map[string]any{"kind": "note", "title": "Existing", "body": "b"}).expect(t, 201)
	entry := base + "/" + r.Body["id"].(string)
	e.do("PATCH", entry, "admin", map[string]any{"version": 1, "body": "b2"}).expect(t, 200)
	ok := func(extra map[string]any) map[string]any {
		m := map[string]any{"kind": "note", "title": "t", "body": "b", "projects": []string{"WEB"}}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	kbRefuse(t, e, []string{`SELECT count(*) FROM knowledge_entries`, `SELECT count(*) FROM knowledge_versions`,
		`SELECT count(*) FROM events`, `SELECT version FROM knowledge_entries WHERE title = 'Existing'`}, []kbRefusal{
		{"no token", "POST", base, "", ok(nil), 401, "unauthenticated", "bearer"},
		{"unknown field", "POST", base, "admin", ok(map[string]any{"tags": []string{"x"}}), 400, "invalid_argument", `unknown field "tags"`},
		{"invalid kind", "POST", base, "admin", ok(map[string]any{"kind": "memo"}), 400, "invalid_argument", `kind: must be one of document, decision, note, debt, got "memo"`},
		{"title too long", "POST", base, "admin", ok(map[string]any{"title": strings.Repeat("t", 301)}), 400, "invalid_argument", "title: at most 300 characters"},
		{"wrong type", "POST", base, "admin", ok(map[string]any{"projects": "WEB"}), 400, "invalid_argument", "projects"},
		{"other org's project", "POST", base, "admin", ok(map[string]any{"projects": []string{"GLX"}}), 400, "invalid_argument", `unknown project "GLX"`},
		{"unknown item", "POST", base, "admin", ok(map[string]any{"items": []string{"WEB-99"}}), 400, "invalid_argument", `unknown item "WEB-99"`},
		{"viewer writing", "POST", base, "viewer", ok(nil), 403, "forbidden", "knowledge.write"},
		{"approver writing", "POST", base, "approver", ok(nil), 403, "forbidden", "knowledge.write"},
		{"outsider writing", "POST", base, "outsider", ok(nil), 404, "not_found", `organization "acme" not found`},
		{"outsider listing", "GET", base, "outsider", nil, 404, "not_found", "not found"},
		{"outsider reading", "GET", entry, "outsider", nil, 404, "not_found", "not found"},
		{"outsider reading via own org", "GET", strings.Replace(entry, "acme", "globex", 1), "outsider", nil, 404, "not_found", "not found"},
		{"outsider versions", "GET", entry + "/versions", "outsider", nil, 404, "not_found", "not found"},
		{"list bad kind", "GET", base + "?kind=memo", "viewer", nil, 400, "invalid_argument", "kind:"},
		{"list bad limit", "GET", base + "?limit=ten", "viewer", nil, 400, "invalid_argument", "limit: must be an integer"},
		{"patch stale", "PATCH", entry, "admin", map[string]any{"version": 1, "title": "x"}, 409, "conflict", "is at version 2, not 1"},
		{"patch without version", "PATCH", entry, "admin", map[string]any{"title": "x"}, 400, "invalid_argument", "version: required"},
		{"patch unknown field", "PATCH", entry, "admin", map[string]any{"version": 2, "owner": "x"}, 400, "invalid_argument", `unknown field "owner"`},
		{"patch title too long", "PATCH", entry, "admin", map[string]any{"version": 2, "title": strings.Repeat("t", 301)}, 400, "invalid_argument", "title: at most 300"},
		{"patch invalid kind", "PATCH", entry, "admin", map[string]any{"version": 2, "kind": "rumour"}, 400, "invalid_argument", "kind:"},
		{"viewer patching", "PATCH", entry, "viewer", map[string]any{"version": 2, "title": "x"}, 403, "forbidden", "knowledge.write"},
		{"unknown entry", "GET", base + "/00000000-0000-0000-0000-000000000000", "admin", nil, 404, "not_found", "not found"},
		{"malformed id", "GET", base + "/nope", "admin", nil, 404, "not_found", "not found"},
	})
}
