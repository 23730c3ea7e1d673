package api_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// trackerSnapshot counts what a refused request must leave untouched.
func trackerSnapshot(t *testing.T, e *env) string {
	t.Helper()
	var out []string
	for _, q := range []string{
		`SELECT count(*) FROM items`, `SELECT COALESCE(sum(version), 0) FROM items`,
		`SELECT count(*) FROM dependencies`, `SELECT count(*) FROM changesets`,
		`SELECT count(*) FROM changesets WHERE status <> 'proposed'`, `SELECT count(*) FROM events`,
		`SELECT sum(next_item_number) FROM projects`,
	} {
		var n int64
		if err := e.db.Pool().QueryRow(context.Background(), q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprint(n))
	}
	return strings.Join(out, ",")
}

// mkItem creates an item as the engineer and returns its JSON.
func mkItem(t *testing.T, e *env, body map[string]any) map[string]any {
	t.Helper()
	return e.do("POST", "/api/v1/projects/WEB/items", "engineer", body).expect(t, http.StatusCreated).Body
}

// listKeys returns the keys of a {"items": [...]} reply.
func listKeys(r response) []string {
	items, _ := r.Body["items"].([]any)
	keys := []string{}
	for _, it := range items {
		m, _ := it.(map[string]any)
		keys = append(keys, fmt.Sprint(m["key"]))
	}
	return keys
}

func TestItemsHappyPath(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ms := mkItem(t, e, map[string]any{"kind": "milestone", "title": "M1"})
	epic := mkItem(t, e, map[string]any{"kind": "epic", "title": "Auth", "milestone": "WEB-1"})
	tk := mkItem(t, e, map[string]any{"kind": "ticket", "title": "Login", "description": "d", "type": "bug",
		"acceptance_criteria": []string{"a", "b"}, "policy": map[string]any{"review_mode": "agent+human"},
		"epic": "WEB-2", "milestone": "WEB-1"})
	if ms["key"] != "WEB-1" || epic["key"] != "WEB-2" || tk["key"] != "WEB-3" {
		t.Fatalf("keys %v %v %v", ms["key"], epic["key"], tk["key"])
	}
	for _, f := range []string{"id", "key", "project", "kind", "title", "description", "state", "type",
		"acceptance_criteria", "policy", "epic", "milestone", "version", "created_at", "updated_at"} {
		if _, ok := tk[f]; !ok {
			t.Errorf("ticket JSON lacks %q: %v", f, tk)
		}
	}
	if tk["project"] != "WEB" || tk["state"] != "backlog" || tk["epic"] != "WEB-2" || tk["version"] != 1.0 ||
		fmt.Sprint(tk["policy"]) != "map[merge_mode:auto review_mode:agent+human]" {
		t.Fatalf("ticket = %v", tk)
	}
	if _, ok := epic["type"]; ok {
		t.Fatalf("epic has a type: %v", epic)
	}
	if _, ok := epic["policy"]; ok {
		t.Fatalf("epic has a policy: %v", epic)
	}
	if v, ok := ms["epic"]; !ok || v != nil {
		t.Fatalf("milestone epic = %v, want null", ms)
	}

	r := e.do("GET", "/api/v1/items/WEB-3", "viewer", nil).expect(t, http.StatusOK)
	if r.Body["title"] != "Login" {
		t.Fatalf("get = %s", r.Raw)
	}
	for _, tt := range []struct {
		query string
		want  string
	}{
		{"", "[WEB-1 WEB-2 WEB-3]"},
		{"?kind=ticket", "[WEB-3]"},
		{"?state=open", "[WEB-1 WEB-2]"},
		{"?epic=WEB-2", "[WEB-3]"},
		{"?milestone=WEB-1", "[WEB-2 WEB-3]"},
		{"?kind=epic&milestone=WEB-1", "[WEB-2]"},
		{"?limit=1", "[WEB-1]"},
	} {
		r := e.do("GET", "/api/v1/projects/WEB/items"+tt.query, "viewer", nil).expect(t, http.StatusOK)
		if got := fmt.Sprint(listKeys(r)); got != tt.want {
			t.Errorf("list%s = %s, want %s", tt.query, got, tt.want)
		}
	}

	r = e.do("PATCH", "/api/v1/items/WEB-3", "engineer", map[string]any{"version": 1, "title": "Log in", "epic": ""}).
		expect(t, http.StatusOK)
	if r.Body["title"] != "Log in" || r.Body["epic"] != nil || r.Body["version"] != 2.0 {
		t.Fatalf("patch = %s", r.Raw)
	}
	r = e.do("POST", "/api/v1/items/WEB-3/transition", "engineer", map[string]any{"state": "ready", "version": 2}).
		expect(t, http.StatusOK)
	if r.Body["state"] != "ready" || r.Body["version"] != 3.0 {
		t.Fatalf("transition = %s", r.Raw)
	}
	r = e.do("GET", "/api/v1/items/WEB-3/history", "viewer", nil).expect(t, http.StatusOK)
	var types []string
	for _, ev := range r.Body["items"].([]any) {
		m := ev.(map[string]any)
		types = append(types, m["type"].(string))
		if m["actor"].(map[string]any)["subject"] != "engineer@example.com" {
			t.Fatalf("event actor = %v", m["actor"])
		}
	}
	if strings.Join(types, ",") != "item.created,item.updated,item.state_changed" {
		t.Fatalf("history = %v", types)
	}
}

func TestDependenciesAndRunnableHappyPath(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for range 3 {
		tk := mkItem(t, e, map[string]any{"kind": "ticket", "title": "t"})
		e.do("POST", "/api/v1/items/"+tk["key"].(string)+"/transition", "engineer",
			map[string]any{"state": "ready", "version": 1}).expect(t, http.StatusOK)
	}
	d := e.do("POST", "/api/v1/items/WEB-1/dependencies", "engineer", map[string]any{"type": "blocks", "item": "WEB-2"}).
		expect(t, http.StatusCreated).Body
	if d["type"] != "blocks" || d["from"] != "WEB-1" || d["to"] != "WEB-2" || d["id"] == "" || d["created_at"] == nil {
		t.Fatalf("dependency = %v", d)
	}
	e.do("POST", "/api/v1/items/WEB-3/dependencies", "engineer", map[string]any{"type": "relates", "item": "WEB-2"}).
		expect(t, http.StatusCreated)
	r := e.do("GET", "/api/v1/items/WEB-2/dependencies", "viewer", nil).expect(t, http.StatusOK)
	if n := len(r.Body["items"].([]any)); n != 2 {
		t.Fatalf("dependencies of WEB-2 = %s", r.Raw)
	}
	r = e.do("GET", "/api/v1/projects/WEB/runnable", "viewer", nil).expect(t, http.StatusOK)
	if got := fmt.Sprint(listKeys(r)); got != "[WEB-1 WEB-3]" {
		t.Fatalf("runnable = %s", got)
	}
	e.do("DELETE", "/api/v1/dependencies/"+d["id"].(string), "engineer", nil).expect(t, http.StatusNoContent)
	r = e.do("GET", "/api/v1/projects/WEB/runnable", "viewer", nil).expect(t, http.StatusOK)
	if got := fmt.Sprint(listKeys(r)); got != "[WEB-1 WEB-2 WEB-3]" {
		t.Fatalf("runnable after delete = %s", got)
	}
	r = e.do("GET", "/api/v1/items/WEB-1/history", "viewer", nil).expect(t, http.StatusOK)
	if !strings.Contains(string(r.Raw), "dependency.added") || !strings.Contains(string(r.Raw), "dependency.removed") {
		t.Fatalf("history lacks dependency events: %s", r.Raw)
	}
	e.do("DELETE", "/api/v1/dependencies/"+d["id"].(string), "engineer", nil).expect(t, http.StatusNotFound)
}

// TestTrackerRefusals walks every bad input of the issue: each refusal has
// its status, code and message, and leaves nothing half-written.
func TestTrackerRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	mkItem(t, e, map[string]any{"kind": "ticket", "title": "one"}) // WEB-1
	mkItem(t, e, map[string]any{"kind": "ticket", "title": "two"}) // WEB-2
	mkItem(t, e, map[string]any{"kind": "epic", "title": "epic"})  // WEB-3
	e.do("POST", "/api/v1/items/WEB-1/dependencies", "engineer", map[string]any{"type": "blocks", "item": "WEB-2"}).
		expect(t, http.StatusCreated)
	e.do("POST", "/api/v1/projects/GLX/items", "outsider", map[string]any{"kind": "ticket", "title": "theirs"}).
		expect(t, http.StatusCreated)
	tests := []struct {
		name, method, path, who string
		body                    any
		status                  int
		code, message           string
	}{
		{"no token", "POST", "/api/v1/projects/WEB/items", "", map[string]any{"kind": "ticket", "title": "x"}, 401, "unauthenticated", "missing bearer token"},
		{"unknown field", "POST", "/api/v1/projects/WEB/items", "engineer", `{"kind":"ticket","title":"x","colour":"red"}`, 400, "invalid_argument", `unknown field "colour"`},
		{"unknown field in patch", "PATCH", "/api/v1/items/WEB-1", "engineer", `{"version":1,"kind":"epic"}`, 400, "invalid_argument", `unknown field "kind"`},
		{"wrong type", "POST", "/api/v1/projects/WEB/items", "engineer", `{"kind":"ticket","title":7}`, 400, "invalid_argument", "field title: must be a string"},
		{"body too large", "POST", "/api/v1/projects/WEB/items", "engineer", `{"kind":"ticket","title":"` + strings.Repeat("x", 1<<20) + `"}`, 413, "invalid_argument", "exceeds"},
		{"invalid enum", "POST", "/api/v1/projects/WEB/items", "engineer", map[string]any{"kind": "ticket", "title": "x", "type": "chore"}, 400, "invalid_argument", `type: must be one of feature, bug, tech_debt, docs, spike, got "chore"`},
		{"invalid kind", "POST", "/api/v1/projects/WEB/items", "engineer", map[string]any{"kind": "story", "title": "x"}, 400, "invalid_argument", `kind: must be one of milestone, epic, ticket`},
		{"invalid filter", "GET", "/api/v1/projects/WEB/items?state=doing", "viewer", nil, 400, "invalid_argument", `state: must be one of`},
		{"title too long", "POST", "/api/v1/projects/WEB/items", "engineer", map[string]any{"kind": "ticket", "title": strings.Repeat("t", 301)}, 400, "invalid_argument", "title: must be at most 300 characters, got 301"},
		{"title too long in patch", "PATCH", "/api/v1/items/WEB-1", "engineer", map[string]any{"version": 1, "title": strings.Repeat("t", 301)}, 400, "invalid_argument", "title: must be at most 300 characters"},
		{"patch without version", "PATCH", "/api/v1/items/WEB-1", "engineer", map[string]any{"title": "x"}, 400, "invalid_argument", "version: required"},
		{"stale version", "PATCH", "/api/v1/items/WEB-1", "engineer", map[string]any{"version": 5, "title": "x"}, 409, "conflict", "you sent version 5, the current version is 1"},
		{"transition not allowed", "POST", "/api/v1/items/WEB-1/transition", "engineer", map[string]any{"state": "in_progress", "version": 1}, 400, "invalid_argument", "transition not allowed: backlog → in_progress"},
		{"transition stale", "POST", "/api/v1/items/WEB-1/transition", "engineer", map[string]any{"state": "ready", "version": 2}, 409, "conflict", "current version is 1"},
		{"transition invalid state", "POST", "/api/v1/items/WEB-3/transition", "engineer", map[string]any{"state": "ready", "version": 1}, 400, "invalid_argument", "state: must be one of open, done, cancelled"},
		{"dependency cycle", "POST", "/api/v1/items/WEB-2/dependencies", "engineer", map[string]any{"type": "blocks", "item": "WEB-1"}, 400, "invalid_argument", "dependency cycle: WEB-2 → WEB-1 → WEB-2"},
		{"dependency self", "POST", "/api/v1/items/WEB-1/dependencies", "engineer", map[string]any{"type": "blocks", "item": "WEB-1"}, 400, "invalid_argument", "an item cannot depend on itself"},
		{"dependency duplicate", "POST", "/api/v1/items/WEB-1/dependencies", "engineer", map[string]any{"type": "blocks", "item": "WEB-2"}, 409, "already_exists", "dependency WEB-1 blocks WEB-2 already exists"},
		{"dependency cross project", "POST", "/api/v1/items/WEB-1/dependencies", "engineer", map[string]any{"type": "blocks", "item": "GLX-1"}, 400, "invalid_argument", "item: no item GLX-1 in project WEB"},
		{"dependency invalid type", "POST", "/api/v1/items/WEB-1/dependencies", "engineer", map[string]any{"type": "needs", "item": "WEB-3"}, 400, "invalid_argument", `type: must be one of blocks, relates`},
		{"viewer creates", "POST", "/api/v1/projects/WEB/items", "viewer", map[string]any{"kind": "ticket", "title": "x"}, 403, "forbidden", "needs tracker.write"},
		{"approver patches", "PATCH", "/api/v1/items/WEB-1", "approver", map[string]any{"version": 1, "title": "x"}, 403, "forbidden", "needs tracker.write"},
		{"viewer adds dependency", "POST", "/api/v1/items/WEB-1/dependencies", "viewer", map[string]any{"type": "relates", "item": "WEB-3"}, 403, "forbidden", "tracker.write"},
		{"other organization's item", "GET", "/api/v1/items/WEB-1", "outsider", nil, 404, "not_found", "not found"},
		{"other organization patches", "PATCH", "/api/v1/items/WEB-1", "outsider", map[string]any{"version": 1, "title": "x"}, 404, "not_found", "not found"},
		{"other organization's project", "GET", "/api/v1/projects/WEB/items", "outsider", nil, 404, "not_found", "not found"},
		{"other organization's runnable", "GET", "/api/v1/projects/WEB/runnable", "outsider", nil, 404, "not_found", "not found"},
		{"other organization's history", "GET", "/api/v1/items/WEB-1/history", "outsider", nil, 404, "not_found", "not found"},
		{"unknown item", "GET", "/api/v1/items/WEB-99", "viewer", nil, 404, "not_found", "item WEB-99 not found"},
		{"unknown dependency", "DELETE", "/api/v1/dependencies/00000000-0000-0000-0000-000000000000", "engineer", nil, 404, "not_found", "not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := trackerSnapshot(t, e)
			r := e.do(tt.method, tt.path, tt.who, tt.body).expect(t, tt.status)
			if r.errorCode() != tt.code || !strings.Contains(r.message(), tt.message) {
				t.Fatalf("error = %s, want %s containing %q", r.Raw, tt.code, tt.message)
			}
			if after := trackerSnapshot(t, e); after != before {
				t.Fatalf("refusal wrote something: %s → %s", before, after)
			}
		})
	}
	r := e.do("PATCH", "/api/v1/items/WEB-1", "engineer", map[string]any{"version": 5, "title": "x"})
	if d, _ := r.Body["details"].(map[string]any); d["current_version"] != 1.0 {
		t.Fatalf("stale version details = %s", r.Raw)
	}
}
