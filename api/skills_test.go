package api_test

import (
	"context"
	"strings"
	"testing"
)

// kbCount counts rows with a SQL count query.
func (e *env) kbCount(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := e.db.Pool().QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// kbList is the "items" array of a list reply.
func (r response) kbList(t *testing.T) []map[string]any {
	t.Helper()
	raw, ok := r.Body["items"].([]any)
	if !ok {
		t.Fatalf("no items array in %s", r.Raw)
	}
	out := make([]map[string]any, len(raw))
	for i, v := range raw {
		out[i], _ = v.(map[string]any)
	}
	return out
}

// kbRefusal is a request that must be refused without writing anything.
type kbRefusal struct {
	name, method, path, who string
	body                    any
	status                  int
	code, msg               string
}

// kbRefuse runs refusals and checks that the given row counts stay put.
func kbRefuse(t *testing.T, e *env, counts []string, cases []kbRefusal) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := make([]int, len(counts))
			for i, q := range counts {
				before[i] = e.kbCount(t, q)
			}
			r := e.do(tc.method, tc.path, tc.who, tc.body).expect(t, tc.status)
			if r.errorCode() != tc.code || !strings.Contains(r.message(), tc.msg) {
				t.Fatalf("error %q %q, want %q containing %q", r.errorCode(), r.message(), tc.code, tc.msg)
			}
			for i, q := range counts {
				if n := e.kbCount(t, q); n != before[i] {
					t.Fatalf("%s: %d, was %d: a refused request wrote something", q, n, before[i])
				}
			}
		})
	}
}

func TestSkillsREST(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.do("POST", "/api/v1/skills", "admin", map[string]any{"name": "planner", "scope": "organization:acme",
		"description": "How the planner plans", "draft": "# Planner v1"}).expect(t, 201)
	id, _ := r.Body["id"].(string)
	if r.Body["scope"] != "organization:acme" || r.Body["latest_version"] != 0.0 || r.Body["created_by"] != "admin@example.com" {
		t.Fatalf("created %s", r.Raw)
	}
	e.do("POST", "/api/v1/skills/"+id+"/publish", "admin", nil).expect(t, 201)
	r = e.do("PATCH", "/api/v1/skills/"+id, "admin", map[string]any{"draft": "# Planner v2"}).expect(t, 200)
	if r.Body["draft"] != "# Planner v2" {
		t.Fatalf("patched %s", r.Raw)
	}
	r = e.do("POST", "/api/v1/skills/"+id+"/publish", "admin", nil).expect(t, 201)
	if r.Body["version"] != 2.0 || r.Body["body"] != "# Planner v2" {
		t.Fatalf("published %s", r.Raw)
	}
	if vs := e.do("GET", "/api/v1/skills/"+id+"/versions", "viewer", nil).expect(t, 200).kbList(t); len(vs) != 2 || vs[0]["version"] != 2.0 {
		t.Fatalf("versions %v", vs)
	}
	if r := e.do("GET", "/api/v1/skills/"+id+"/versions/1", "viewer", nil).expect(t, 200); r.Body["body"] != "# Planner v1" {
		t.Fatalf("version 1 %s", r.Raw)
	}
	e.do("GET", "/api/v1/skills/"+id+"/versions/9", "viewer", nil).expect(t, 404)
	e.do("GET", "/api/v1/skills/"+id+"/versions/x", "viewer", nil).expect(t, 404)
	if r := e.do("GET", "/api/v1/skills/"+id, "viewer", nil).expect(t, 200); r.Body["latest_version"] != 2.0 {
		t.Fatalf("get %s", r.Raw)
	}
	for _, tc := range []struct {
		who, query string
		n          int
	}{
		{"viewer", "", 1},
		{"admin", "?scope=organization:acme", 1},
		{"admin", "?scope=platform", 0},
		{"outsider", "", 0},
	} {
		if got := e.do("GET", "/api/v1/skills"+tc.query, tc.who, nil).expect(t, 200).kbList(t); len(got) != tc.n {
			t.Errorf("%s GET /skills%s: %d skills, want %d", tc.who, tc.query, len(got), tc.n)
		}
	}

	// Pins: 1 fixes version 1; an unknown version is a problem and version 0.
	r = e.do("PUT", "/api/v1/projects/WEB/skills/planner/pin", "admin", map[string]any{"version": 1}).expect(t, 200)
	if r.Body["version"] != 1.0 || r.Body["project"] != "WEB" {
		t.Fatalf("pin %s", r.Raw)
	}
	eff := e.do("GET", "/api/v1/projects/WEB/skills", "viewer", nil).expect(t, 200).kbList(t)
	if len(eff) != 1 || eff[0]["version"] != 1.0 || eff[0]["resolved_version"] != 1.0 || eff[0]["problem"] != nil {
		t.Fatalf("effective %v", eff)
	}
	e.do("PUT", "/api/v1/projects/WEB/skills/planner/pin", "admin", map[string]any{"version": 42}).expect(t, 200)
	e.do("PUT", "/api/v1/projects/WEB/skills/ghost/pin", "admin", map[string]any{"version": 1}).expect(t, 200)
	e.do("PUT", "/api/v1/projects/WEB/skills/old/pin", "admin", map[string]any{"disabled": true}).expect(t, 200)
	eff = e.do("GET", "/api/v1/projects/WEB/skills", "viewer", nil).expect(t, 200).kbList(t)
	if len(eff) != 2 || eff[0]["name"] != "ghost" || eff[0]["version"] != 0.0 || eff[0]["problem"] == nil ||
		eff[1]["name"] != "planner" || eff[1]["version"] != 0.0 || eff[1]["resolved_version"] != 2.0 ||
		!strings.Contains(eff[1]["problem"].(string), "version 42") {
		t.Fatalf("effective with problems %v", eff)
	}
	if pins := e.do("GET", "/api/v1/projects/WEB/skill-pins", "viewer", nil).expect(t, 200).kbList(t); len(pins) != 3 ||
		pins[2]["name"] != "planner" || pins[1]["disabled"] != true || pins[1]["version"] != nil {
		t.Fatalf("pins %v", pins)
	}
	e.do("DELETE", "/api/v1/projects/WEB/skills/ghost/pin", "admin", nil).expect(t, 204)
	e.do("DELETE", "/api/v1/projects/WEB/skills/ghost/pin", "admin", nil).expect(t, 404)
	if n := e.kbCount(t, `SELECT count(*) FROM events WHERE type IN ('skill.created', 'skill.updated', 'skill.published', 'skill.pinned', 'skill.unpinned')`); n != 9 {
		t.Fatalf("skill events = %d, want 9", n)
	}
}

func TestSkillsRESTRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.do("POST", "/api/v1/skills", "admin", map[string]any{"name": "style", "scope": "organization:acme", "draft": "d"}).expect(t, 201)
	skill := "/api/v1/skills/" + r.Body["id"].(string)
	ok := func(extra map[string]any) map[string]any {
		m := map[string]any{"name": "new-skill", "scope": "project:WEB", "draft": "d"}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	kbRefuse(t, e, []string{`SELECT count(*) FROM skills`, `SELECT count(*) FROM skill_versions`,
		`SELECT count(*) FROM skill_pins`, `SELECT count(*) FROM events`}, []kbRefusal{
		{"no token", "POST", "/api/v1/skills", "", ok(nil), 401, "unauthenticated", "bearer"},
		{"unknown field", "POST", "/api/v1/skills", "admin", ok(map[string]any{"color": "red"}), 400, "invalid_argument", `unknown field "color"`},
		{"invalid name", "POST", "/api/v1/skills", "admin", ok(map[string]any{"name": "Bad_Name"}), 400, "invalid_argument", "name: must be 2-64 characters"},
		{"invalid scope", "POST", "/api/v1/skills", "admin", ok(map[string]any{"scope": "galaxy"}), 400, "invalid_argument", "scope: must be platform"},
		{"description too long", "POST", "/api/v1/skills", "admin", ok(map[string]any{"description": strings.Repeat("d", 1001)}), 400, "invalid_argument", "description: at most 1000"},
		{"duplicate", "POST", "/api/v1/skills", "admin", ok(map[string]any{"name": "style", "scope": "organization:acme"}), 409, "already_exists", "already exists"},
		{"viewer creating", "POST", "/api/v1/skills", "viewer", ok(nil), 403, "forbidden", "skill.write"},
		{"engineer creating", "POST", "/api/v1/skills", "engineer", ok(nil), 403, "forbidden", "skill.write"},
		{"org admin at platform scope", "POST", "/api/v1/skills", "admin", ok(map[string]any{"scope": "platform"}), 403, "forbidden", "platform scope"},
		{"outsider creating in acme", "POST", "/api/v1/skills", "outsider", ok(map[string]any{"scope": "organization:acme"}), 404, "not_found", "not found"},
		{"outsider reading", "GET", skill, "outsider", nil, 404, "not_found", "not found"},
		{"outsider reading versions", "GET", skill + "/versions", "outsider", nil, 404, "not_found", "not found"},
		{"viewer patching", "PATCH", skill, "viewer", map[string]any{"draft": "x"}, 403, "forbidden", "skill.write"},
		{"patch unknown field", "PATCH", skill, "admin", map[string]any{"body": "x"}, 400, "invalid_argument", `unknown field "body"`},
		{"patch nothing", "PATCH", skill, "admin", map[string]any{}, 400, "invalid_argument", "at least one"},
		{"viewer publishing", "POST", skill + "/publish", "viewer", nil, 403, "forbidden", "skill.write"},
		{"engineer pinning", "PUT", "/api/v1/projects/WEB/skills/style/pin", "engineer", map[string]any{"version": 1}, 403, "forbidden", "skill.write"},
		{"outsider pinning", "PUT", "/api/v1/projects/WEB/skills/style/pin", "outsider", map[string]any{"version": 1}, 404, "not_found", "not found"},
		{"pin both", "PUT", "/api/v1/projects/WEB/skills/style/pin", "admin", map[string]any{"version": 1, "disabled": true}, 400, "invalid_argument", "exactly one"},
		{"pin negative", "PUT", "/api/v1/projects/WEB/skills/style/pin", "admin", map[string]any{"version": -3}, 400, "invalid_argument", "version:"},
		{"pin unknown field", "PUT", "/api/v1/projects/WEB/skills/style/pin", "admin", map[string]any{"v": 1}, 400, "invalid_argument", `unknown field "v"`},
		{"pin bad name", "PUT", "/api/v1/projects/WEB/skills/Style!/pin", "admin", map[string]any{"version": 1}, 400, "invalid_argument", "name:"},
		{"outsider effective skills", "GET", "/api/v1/projects/WEB/skills", "outsider", nil, 404, "not_found", "not found"},
	})
}
