package api_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// permissionsSnapshot sums up every table a REST write can touch, so that a
// refusal provably wrote nothing.
func permissionsSnapshot(t *testing.T, e *env) string {
	t.Helper()
	var s string
	err := e.db.Pool().QueryRow(context.Background(), `SELECT concat_ws(',',
		(SELECT count(*) FROM events), (SELECT max(seq) FROM events),
		(SELECT count(*) FROM organizations), (SELECT max(updated_at) FROM organizations),
		(SELECT count(*) FROM projects), (SELECT max(updated_at) FROM projects),
		(SELECT count(*) FROM role_bindings), (SELECT count(*) FROM subjects),
		(SELECT count(*) FROM api_tokens), (SELECT count(*) FROM api_tokens WHERE revoked_at IS NOT NULL),
		(SELECT count(*) FROM items), (SELECT sum(version) FROM items), (SELECT count(*) FROM dependencies),
		(SELECT count(*) FROM changesets), (SELECT max(updated_at) FROM changesets),
		(SELECT count(*) FROM skills), (SELECT max(updated_at) FROM skills), (SELECT count(*) FROM skill_versions),
		(SELECT count(*) FROM skill_pins), (SELECT max(updated_at) FROM skill_pins),
		(SELECT count(*) FROM knowledge_entries), (SELECT count(*) FROM knowledge_versions),
		(SELECT count(*) FROM planner_sessions), (SELECT count(*) FROM planner_messages),
		(SELECT count(*) FROM planner_turns), (SELECT count(*) FROM planner_turns WHERE status = 'cancelled'),
		(SELECT count(*) FROM credentials), (SELECT max(updated_at) FROM credentials),
		(SELECT count(*) FROM limits), (SELECT max(updated_at) FROM limits),
		(SELECT count(*) FROM model_allowlists), (SELECT max(updated_at) FROM model_allowlists))`).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestPermissions walks every /api/v1 route × {no token, viewer, engineer,
// admin of acme, admin of another organization}. The table is checked
// against the registered routes both ways, so a new route cannot be
// forgotten. Viewer and engineer are bound on project WEB (SPEC §2): reads
// are 200 for both; tracker, knowledge and planner writes are the
// engineer's; credential.manage, role_binding.manage, skill.write and
// tenancy writes are neither's. Anything of acme answers the other
// organization's admin 404.
func TestPermissions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.restart(t, withPlanner(), withSealer(testSealer(t)))

	n := 0
	next := func() int { n++; return n }
	// post creates something as acme's admin and returns a field of the reply.
	post := func(method, path string, body any, field string) string {
		t.Helper()
		r := e.do(method, path, "admin", body)
		if r.Status >= 300 {
			t.Fatalf("seed %s %s: %d %s", method, path, r.Status, r.Raw)
		}
		if field == "" {
			return ""
		}
		return fmt.Sprint(r.Body[field])
	}
	item := func() string {
		return post("POST", "/api/v1/projects/WEB/items", map[string]any{"kind": "ticket", "title": fmt.Sprint("t", next())}, "key")
	}
	changeset := func() string {
		return post("POST", "/api/v1/projects/WEB/changesets", map[string]any{"title": "c", "operations": []any{
			map[string]any{"kind": "create_item", "create": map[string]any{"kind": "ticket", "title": "x"}}}}, "id")
	}
	skill := func() (id, name string) { // a published project skill
		name = fmt.Sprint("skill-", next())
		id = post("POST", "/api/v1/skills", map[string]any{"name": name, "scope": "project:WEB", "description": "d", "draft": "# v1"}, "id")
		post("POST", "/api/v1/skills/"+id+"/publish", nil, "")
		return id, name
	}
	pinned := func() string {
		_, name := skill()
		post("PUT", "/api/v1/projects/WEB/skills/"+name+"/pin", map[string]any{"version": 0}, "")
		return name
	}
	entry := func() string {
		return post("POST", "/api/v1/organizations/acme/knowledge/entries", map[string]any{"kind": "note", "title": "n", "body": "knowledge body", "projects": []string{"WEB"}}, "id")
	}
	session := post("POST", "/api/v1/projects/WEB/planner/sessions", map[string]any{"title": "plan"}, "id")
	turn := post("POST", "/api/v1/planner/sessions/"+session+"/messages", map[string]any{"text": "seed"}, "turn")
	adminToken := post("POST", "/api/v1/tokens", map[string]any{"name": "admin's"}, "id")
	skillID, skillName := skill()
	entryID := entry()
	itemKey := item()
	credential := func(path string) string {
		post("PUT", path, map[string]any{"api_key": fmt.Sprint("sk-", next())}, "")
		return path
	}
	limits := func(path string) string {
		post("PUT", path, map[string]any{"token_budget": 10}, "")
		return path
	}
	allowlist := func(path string) string {
		post("PUT", path, map[string]any{"models": []string{"claude-a"}}, "")
		return path
	}

	type req struct {
		path string
		body any
	}
	fixed := func(path string, body any) func() req { return func() req { return req{path, body} } }
	type row struct {
		route string // "METHOD /path" as in the OpenAPI document
		req   func() req
		// Statuses for the viewer, the engineer and acme's admin; the
		// outsider gets 404 and no token 401 unless set.
		viewer, engineer, admin int
		outsider, anonymous     int
	}
	const skip = 0
	rows := []row{
		// Tokens are the caller's own: no organization involved.
		{route: "POST /tokens", req: fixed("/tokens", map[string]any{"name": "mine"}), viewer: 201, engineer: 201, admin: 201, outsider: 201},
		{route: "GET /tokens", req: fixed("/tokens", nil), viewer: 200, engineer: 200, admin: 200, outsider: 200},
		{route: "DELETE /tokens/{id}", req: fixed("/tokens/"+adminToken, nil), viewer: 404, engineer: 404, admin: 204, outsider: 404},

		// Tenancy.
		{route: "GET /organizations", req: fixed("/organizations", nil), viewer: 200, engineer: 200, admin: 200, outsider: 200},
		{route: "POST /organizations", req: func() req {
			return req{"/organizations", map[string]any{"key": fmt.Sprint("org-", next()), "name": "O"}}
		}, viewer: 403, engineer: 403, admin: 403, outsider: 403},
		{route: "GET /organizations/{org}", req: fixed("/organizations/acme", nil), viewer: 200, engineer: 200, admin: 200},
		{route: "PATCH /organizations/{org}", req: fixed("/organizations/acme", map[string]any{"name": "Acme Inc"}), viewer: 403, engineer: 403, admin: 200},
		{route: "GET /organizations/{org}/projects", req: fixed("/organizations/acme/projects", nil), viewer: 200, engineer: 200, admin: 200},
		{route: "POST /organizations/{org}/projects", req: func() req {
			return req{"/organizations/acme/projects", map[string]any{"key": fmt.Sprint("P", next()), "name": "P"}}
		}, viewer: 403, engineer: 403, admin: 201},
		{route: "GET /organizations/{org}/role-bindings", req: fixed("/organizations/acme/role-bindings", nil), viewer: 403, engineer: 403, admin: 200},
		{route: "POST /organizations/{org}/role-bindings", req: func() req {
			return req{"/organizations/acme/role-bindings", map[string]any{"subject": fmt.Sprint("u", next(), "@example.com"), "role": "viewer"}}
		}, viewer: 403, engineer: 403, admin: 201},
		{route: "GET /projects/{project}", req: fixed("/projects/WEB", nil), viewer: 200, engineer: 200, admin: 200},
		{route: "PATCH /projects/{project}", req: fixed("/projects/WEB", map[string]any{"description": "d"}), viewer: 403, engineer: 403, admin: 200},
		{route: "GET /projects/{project}/role-bindings", req: fixed("/projects/WEB/role-bindings", nil), viewer: 403, engineer: 200, admin: 200},
		{route: "POST /projects/{project}/role-bindings", req: func() req {
			return req{"/projects/WEB/role-bindings", map[string]any{"subject": fmt.Sprint("u", next(), "@example.com"), "role": "viewer"}}
		}, viewer: 403, engineer: 403, admin: 201},
		{route: "DELETE /role-bindings/{id}", req: func() req {
			return req{"/role-bindings/" + post("POST", "/api/v1/projects/WEB/role-bindings",
				map[string]any{"subject": fmt.Sprint("u", next(), "@example.com"), "role": "viewer"}, "id"), nil}
		}, viewer: 403, engineer: 403, admin: 204},

		// Tracker and changesets.
		{route: "GET /projects/{project}/items", req: fixed("/projects/WEB/items", nil), viewer: 200, engineer: 200, admin: 200},
		{route: "POST /projects/{project}/items", req: fixed("/projects/WEB/items", map[string]any{"kind": "ticket", "title": "x"}), viewer: 403, engineer: 201, admin: 201},
		{route: "GET /projects/{project}/runnable", req: fixed("/projects/WEB/runnable", nil), viewer: 200, engineer: 200, admin: 200},
		{route: "GET /items/{item}", req: fixed("/items/"+itemKey, nil), viewer: 200, engineer: 200, admin: 200},
		{route: "PATCH /items/{item}", req: func() req { return req{"/items/" + item(), map[string]any{"version": 1, "title": "y"}} }, viewer: 403, engineer: 200, admin: 200},
		{route: "POST /items/{item}/transition", req: func() req {
			return req{"/items/" + item() + "/transition", map[string]any{"state": "ready", "version": 1}}
		}, viewer: 403, engineer: 200, admin: 200},
		{route: "GET /items/{item}/history", req: fixed("/items/"+itemKey+"/history", nil), viewer: 200, engineer: 200, admin: 200},
		{route: "GET /items/{item}/dependencies", req: fixed("/items/"+itemKey+"/dependencies", nil), viewer: 200, engineer: 200, admin: 200},
		{route: "POST /items/{item}/dependencies", req: func() req {
			return req{"/items/" + item() + "/dependencies", map[string]any{"type": "blocks", "item": item()}}
		}, viewer: 403, engineer: 201, admin: 201},
		{route: "DELETE /dependencies/{id}", req: func() req {
			return req{"/dependencies/" + post("POST", "/api/v1/items/"+item()+"/dependencies", map[string]any{"type": "relates", "item": item()}, "id"), nil}
		}, viewer: 403, engineer: 204, admin: 204},
		{route: "GET /projects/{project}/changesets", req: fixed("/projects/WEB/changesets", nil), viewer: 200, engineer: 200, admin: 200},
		{route: "POST /projects/{project}/changesets", req: fixed("/projects/WEB/changesets", map[string]any{"title": "c", "operations": []any{
			map[string]any{"kind": "create_item", "create": map[string]any{"kind": "epic", "title": "x"}}}}), viewer: 403, engineer: 201, admin: 201},
		{route: "GET /changesets/{id}", req: func() req { return req{"/changesets/" + changeset(), nil} }, viewer: 200, engineer: 200, admin: 200},
		{route: "POST /changesets/{id}/apply", req: func() req {
			return req{"/changesets/" + changeset() + "/apply", map[string]any{"operations": []int{0}}}
		}, viewer: 403, engineer: 200, admin: 200},
		{route: "POST /changesets/{id}/reject", req: func() req { return req{"/changesets/" + changeset() + "/reject", nil} }, viewer: 403, engineer: 200, admin: 200},

		// Skills.
		{route: "GET /skills", req: fixed("/skills", nil), viewer: 200, engineer: 200, admin: 200, outsider: 200},
		{route: "POST /skills", req: func() req {
			return req{"/skills", map[string]any{"name": fmt.Sprint("new-", next()), "scope": "project:WEB", "description": "d", "draft": "x"}}
		}, viewer: 403, engineer: 403, admin: 201},
		{route: "GET /skills/{skill}", req: fixed("/skills/"+skillID, nil), viewer: 200, engineer: 200, admin: 200},
		{route: "PATCH /skills/{skill}", req: fixed("/skills/"+skillID, map[string]any{"draft": "# v2"}), viewer: 403, engineer: 403, admin: 200},
		{route: "POST /skills/{skill}/publish", req: func() req { id, _ := skill(); return req{"/skills/" + id + "/publish", nil} }, viewer: 403, engineer: 403, admin: 201},
		{route: "GET /skills/{skill}/versions", req: fixed("/skills/"+skillID+"/versions", nil), viewer: 200, engineer: 200, admin: 200},
		{route: "GET /skills/{skill}/versions/{n}", req: fixed("/skills/"+skillID+"/versions/1", nil), viewer: 200, engineer: 200, admin: 200},
		{route: "GET /projects/{project}/skills", req: fixed("/projects/WEB/skills", nil), viewer: 200, engineer: 200, admin: 200},
		{route: "GET /projects/{project}/skill-pins", req: fixed("/projects/WEB/skill-pins", nil), viewer: 200, engineer: 200, admin: 200},
		{route: "PUT /projects/{project}/skills/{name}/pin", req: fixed("/projects/WEB/skills/"+skillName+"/pin", map[string]any{"version": 1}), viewer: 403, engineer: 403, admin: 200},
		{route: "DELETE /projects/{project}/skills/{name}/pin", req: func() req { return req{"/projects/WEB/skills/" + pinned() + "/pin", nil} }, viewer: 403, engineer: 403, admin: 204},

		// Knowledge and search. A project-bound engineer writes entries linked
		// to its projects.
		{route: "GET /organizations/{org}/knowledge/entries", req: fixed("/organizations/acme/knowledge/entries", nil), viewer: 200, engineer: 200, admin: 200},
		{route: "POST /organizations/{org}/knowledge/entries", req: fixed("/organizations/acme/knowledge/entries", map[string]any{"kind": "decision", "title": "t", "body": "b", "projects": []string{"WEB"}}), viewer: 403, engineer: 201, admin: 201},
		{route: "GET /organizations/{org}/knowledge/entries/{id}", req: fixed("/organizations/acme/knowledge/entries/"+entryID, nil), viewer: 200, engineer: 200, admin: 200},
		{route: "PATCH /organizations/{org}/knowledge/entries/{id}", req: func() req {
			return req{"/organizations/acme/knowledge/entries/" + entry(), map[string]any{"version": 1, "title": "t2"}}
		}, viewer: 403, engineer: 200, admin: 200},
		{route: "GET /organizations/{org}/knowledge/entries/{id}/versions", req: fixed("/organizations/acme/knowledge/entries/"+entryID+"/versions", nil), viewer: 200, engineer: 200, admin: 200},
		{route: "GET /organizations/{org}/knowledge/entries/{id}/versions/{n}", req: fixed("/organizations/acme/knowledge/entries/"+entryID+"/versions/1", nil), viewer: 200, engineer: 200, admin: 200},
		{route: "GET /organizations/{org}/knowledge/search", req: fixed("/organizations/acme/knowledge/search?q=knowledge", nil), viewer: 200, engineer: 200, admin: 200},
		{route: "GET /search", req: fixed("/search?q=t1&project=WEB", nil), viewer: 200, engineer: 200, admin: 200},

		// Planner.
		{route: "POST /projects/{project}/planner/sessions", req: fixed("/projects/WEB/planner/sessions", map[string]any{"title": "s"}), viewer: 403, engineer: 201, admin: 201},
		{route: "GET /projects/{project}/planner/sessions", req: fixed("/projects/WEB/planner/sessions", nil), viewer: 200, engineer: 200, admin: 200},
		{route: "GET /planner/sessions/{session}", req: fixed("/planner/sessions/"+session, nil), viewer: 200, engineer: 200, admin: 200},
		{route: "POST /planner/sessions/{session}/messages", req: fixed("/planner/sessions/"+session+"/messages", map[string]any{"text": "plan the release"}), viewer: 403, engineer: 202, admin: 202},
		{route: "POST /planner/sessions/{session}/cancel", req: fixed("/planner/sessions/"+session+"/cancel", nil), viewer: 403, engineer: 200, admin: 200},
		{route: "GET /planner/sessions/{session}/outputs", req: fixed("/planner/sessions/"+session+"/outputs", nil), viewer: 200, engineer: 200, admin: 200},
		{route: "POST /planner/sessions/{session}/stream-tickets", req: fixed("/planner/sessions/"+session+"/stream-tickets", nil), viewer: 201, engineer: 201, admin: 201},
		{route: "GET /planner/sessions/{session}/turns/{turn}", req: fixed("/planner/sessions/"+session+"/turns/"+turn, nil), viewer: 200, engineer: 200, admin: 200},

		// Scheduling: weights and caps (an organization's are a platform
		// admin's to set), and the platform's backlog.
		{route: "GET /organizations/{org}/scheduling", req: fixed("/organizations/acme/scheduling", nil), viewer: 200, engineer: 200, admin: 200},
		{route: "PUT /organizations/{org}/scheduling", req: fixed("/organizations/acme/scheduling", map[string]any{"weight": 2}), viewer: 403, engineer: 403, admin: 403},
		{route: "GET /projects/{project}/scheduling", req: fixed("/projects/WEB/scheduling", nil), viewer: 200, engineer: 200, admin: 200},
		{route: "PUT /projects/{project}/scheduling", req: fixed("/projects/WEB/scheduling", map[string]any{"weight": 2}), viewer: 403, engineer: 403, admin: 200},
		{route: "GET /planner/backlog", req: fixed("/planner/backlog", nil), viewer: 403, engineer: 403, admin: 403, outsider: 403},

		// Gateway: credentials (credential.manage only), usage, limits.
		{route: "GET /organizations/{org}/credentials", req: fixed("/organizations/acme/credentials", nil), viewer: 403, engineer: 403, admin: 200},
		{route: "PUT /organizations/{org}/credentials/{provider}", req: fixed("/organizations/acme/credentials/anthropic", map[string]any{"api_key": "sk-1"}), viewer: 403, engineer: 403, admin: 200},
		{route: "DELETE /organizations/{org}/credentials/{provider}", req: func() req {
			return req{credential("/api/v1/organizations/acme/credentials/openai")[len(v1Prefix):], nil}
		}, viewer: 403, engineer: 403, admin: 204},
		{route: "GET /projects/{project}/credentials", req: fixed("/projects/WEB/credentials", nil), viewer: 403, engineer: 403, admin: 200},
		{route: "PUT /projects/{project}/credentials/{provider}", req: fixed("/projects/WEB/credentials/openai", map[string]any{"api_key": "sk-2", "base_url": "http://localhost:11434/v1"}), viewer: 403, engineer: 403, admin: 200},
		{route: "DELETE /projects/{project}/credentials/{provider}", req: func() req {
			return req{credential("/api/v1/projects/WEB/credentials/anthropic")[len(v1Prefix):], nil}
		}, viewer: 403, engineer: 403, admin: 204},
		{route: "GET /projects/{project}/usage", req: fixed("/projects/WEB/usage?group_by=day", nil), viewer: 200, engineer: 200, admin: 200},
		{route: "GET /organizations/{org}/limits", req: fixed("/organizations/acme/limits", nil), viewer: 200, engineer: 200, admin: 200},
		{route: "PUT /organizations/{org}/limits", req: fixed("/organizations/acme/limits", map[string]any{"requests_per_minute": 100}), viewer: 403, engineer: 403, admin: 200},
		{route: "DELETE /organizations/{org}/limits", req: func() req { return req{limits("/api/v1/organizations/acme/limits")[len(v1Prefix):], nil} }, viewer: 403, engineer: 403, admin: 204},
		{route: "GET /projects/{project}/limits", req: fixed("/projects/WEB/limits", nil), viewer: 200, engineer: 200, admin: 200},
		{route: "PUT /projects/{project}/limits", req: fixed("/projects/WEB/limits", map[string]any{"tokens_per_minute": 1000}), viewer: 403, engineer: 403, admin: 200},
		{route: "DELETE /projects/{project}/limits", req: func() req { return req{limits("/api/v1/projects/WEB/limits")[len(v1Prefix):], nil} }, viewer: 403, engineer: 403, admin: 204},
		{route: "GET /organizations/{org}/usage", req: fixed("/organizations/acme/usage?group_by=model", nil), viewer: 200, engineer: 200, admin: 200},
		{route: "GET /organizations/{org}/models", req: fixed("/organizations/acme/models", nil), viewer: 200, engineer: 200, admin: 200},
		{route: "PUT /organizations/{org}/models", req: fixed("/organizations/acme/models", map[string]any{"models": []string{"claude-a"}}), viewer: 403, engineer: 403, admin: 200},
		{route: "DELETE /organizations/{org}/models", req: func() req { return req{allowlist("/api/v1/organizations/acme/models")[len(v1Prefix):], nil} }, viewer: 403, engineer: 403, admin: 204},
		{route: "GET /projects/{project}/models", req: fixed("/projects/WEB/models", nil), viewer: 200, engineer: 200, admin: 200},
		{route: "PUT /projects/{project}/models", req: fixed("/projects/WEB/models", map[string]any{"models": []string{"claude-a"}}), viewer: 403, engineer: 403, admin: 200},
		{route: "DELETE /projects/{project}/models", req: func() req { return req{allowlist("/api/v1/projects/WEB/models")[len(v1Prefix):], nil} }, viewer: 403, engineer: 403, admin: 204},

		// The document itself is public.
		{route: "GET /openapi.json", req: fixed("/openapi.json", nil), viewer: 200, engineer: 200, admin: 200, outsider: 200, anonymous: 200},
	}

	// The table and the registered routes agree both ways.
	registered := v1Routes(e.srv)
	var tabled []string
	for _, r := range rows {
		if slices.Contains(tabled, r.route) {
			t.Errorf("route %s is in the table twice", r.route)
		}
		tabled = append(tabled, r.route)
		if !slices.Contains(registered, r.route) {
			t.Errorf("table row %s is not a registered route", r.route)
		}
	}
	for _, r := range registered {
		if !slices.Contains(tabled, r) {
			t.Errorf("route %s has no row in the permission table", r)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	for _, r := range rows {
		if r.outsider == skip {
			r.outsider = http.StatusNotFound
		}
		if r.anonymous == skip {
			r.anonymous = http.StatusUnauthorized
		}
		method, _, _ := strings.Cut(r.route, " ")
		for _, c := range []struct {
			who    string
			status int
		}{{"", r.anonymous}, {"viewer", r.viewer}, {"outsider", r.outsider}, {"engineer", r.engineer}, {"admin", r.admin}} {
			name := c.who
			if name == "" {
				name = "no token"
			}
			t.Run(r.route+"/"+name, func(t *testing.T) {
				q := r.req()
				before := permissionsSnapshot(t, e)
				got := e.do(method, v1Prefix+q.path, c.who, q.body)
				got.expect(t, c.status)
				if c.status >= 400 {
					if want := map[int]string{401: "unauthenticated", 403: "forbidden", 404: "not_found"}[c.status]; got.errorCode() != want {
						t.Errorf("error %q, want %q", got.errorCode(), want)
					}
					if after := permissionsSnapshot(t, e); after != before {
						t.Errorf("refusal wrote something:\n before %s\n after  %s", before, after)
					}
				}
			})
		}
	}
}
