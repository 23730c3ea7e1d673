package api_test

import (
	"context"
	"slices"
	"strings"
	"testing"
)

// tenancyCall is one request of a table test and the reply it must get.
type tenancyCall struct {
	name    string
	method  string
	path    string
	who     string
	body    any
	status  int
	code    string // the error code, for error replies
	message string // a substring of the message
}

func (e *env) runCalls(t *testing.T, calls []tenancyCall) {
	t.Helper()
	for _, tt := range calls {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do(tt.method, tt.path, tt.who, tt.body).expect(t, tt.status)
			if tt.code != "" && r.errorCode() != tt.code {
				t.Errorf("error %q, want %q; body %s", r.errorCode(), tt.code, r.Raw)
			}
			if !strings.Contains(r.message(), tt.message) {
				t.Errorf("message %q does not contain %q", r.message(), tt.message)
			}
		})
	}
}

// listKeys lists the "key" of each entry of a list reply.
func (r response) listKeys() []string {
	items, _ := r.Body["items"].([]any)
	var out []string
	for _, it := range items {
		k, _ := it.(map[string]any)["key"].(string)
		out = append(out, k)
	}
	return out
}

// countRows counts rows of a table.
func (e *env) countRows(t *testing.T, table string) int {
	t.Helper()
	var n int
	if err := e.db.Pool().QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestOrganizationsREST(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for who, want := range map[string][]string{
		"platform": {"acme", "globex"},
		"admin":    {"acme"},
		"viewer":   {"acme"}, // through its project binding
		"outsider": {"globex"},
	} {
		if got := e.do("GET", "/api/v1/organizations", who, nil).expect(t, 200).listKeys(); !slices.Equal(got, want) {
			t.Errorf("%s lists %v, want %v", who, got, want)
		}
	}
	e.runCalls(t, []tenancyCall{
		{"create", "POST", "/api/v1/organizations", "platform", map[string]any{"key": "initech", "name": "Initech"}, 201, "", ""},
		{"create by organization-admin", "POST", "/api/v1/organizations", "admin", map[string]any{"key": "other", "name": "Other"}, 403, "forbidden", "organization.create"},
		{"create twice", "POST", "/api/v1/organizations", "platform", map[string]any{"key": "initech", "name": "Initech"}, 409, "already_exists", "initech"},
		{"create unknown field", "POST", "/api/v1/organizations", "platform", `{"key":"x1","name":"X","owner":"me"}`, 400, "invalid_argument", `unknown field "owner"`},
		{"create bad key", "POST", "/api/v1/organizations", "platform", map[string]any{"key": "Bad Key", "name": "X"}, 400, "invalid_argument", "key"},
		{"no token", "GET", "/api/v1/organizations", "", nil, 401, "unauthenticated", ""},
		{"get", "GET", "/api/v1/organizations/acme", "admin", nil, 200, "", ""},
		{"get through a project binding", "GET", "/api/v1/organizations/acme", "viewer", nil, 200, "", ""},
		{"get by outsider", "GET", "/api/v1/organizations/acme", "outsider", nil, 404, "not_found", `organization "acme" not found`},
		{"get unknown", "GET", "/api/v1/organizations/nope", "outsider", nil, 404, "not_found", `organization "nope" not found`},
		{"rename", "PATCH", "/api/v1/organizations/acme", "admin", map[string]any{"name": "Acme Corp"}, 200, "", ""},
		{"rename by viewer", "PATCH", "/api/v1/organizations/acme", "viewer", map[string]any{"name": "Mine"}, 403, "forbidden", "organization.update"},
		{"rename by outsider", "PATCH", "/api/v1/organizations/acme", "outsider", map[string]any{"name": "Mine"}, 404, "not_found", ""},
		{"rename unknown field", "PATCH", "/api/v1/organizations/acme", "admin", `{"key":"acme2"}`, 400, "invalid_argument", `unknown field "key"`},
		{"rename to nothing", "PATCH", "/api/v1/organizations/acme", "admin", `{}`, 400, "invalid_argument", "nothing to update"},
		{"rename too long", "PATCH", "/api/v1/organizations/acme", "admin", map[string]any{"name": strings.Repeat("x", 201)}, 400, "invalid_argument", "name"},
	})
	if r := e.do("GET", "/api/v1/organizations/acme", "engineer", nil).expect(t, 200); r.Body["name"] != "Acme Corp" {
		t.Fatalf("after rename %s", r.Raw)
	}
	var actor string
	if err := e.db.Pool().QueryRow(context.Background(), `SELECT actor_subject FROM events
		WHERE type = 'organization.updated' AND entity_id = $1`, e.org.ID).Scan(&actor); err != nil || actor != "admin@example.com" {
		t.Fatalf("organization.updated actor %q, %v", actor, err)
	}
}

func TestProjectsREST(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.runCalls(t, []tenancyCall{
		{"create", "POST", "/api/v1/organizations/acme/projects", "admin", map[string]any{"key": "API", "name": "Api"}, 201, "", ""},
		{"create by engineer", "POST", "/api/v1/organizations/acme/projects", "engineer", map[string]any{"key": "ENG", "name": "Eng"}, 403, "forbidden", "project.create"},
		{"create by outsider", "POST", "/api/v1/organizations/acme/projects", "outsider", map[string]any{"key": "OUT", "name": "Out"}, 404, "not_found", ""},
		{"create twice", "POST", "/api/v1/organizations/acme/projects", "admin", map[string]any{"key": "API", "name": "Api"}, 409, "already_exists", ""},
		{"create bad key", "POST", "/api/v1/organizations/acme/projects", "admin", map[string]any{"key": "api", "name": "Api"}, 400, "invalid_argument", "key"},
		{"create unknown field", "POST", "/api/v1/organizations/acme/projects", "admin", `{"key":"DOC","name":"Doc","lead":"x"}`, 400, "invalid_argument", `unknown field "lead"`},
		{"list by outsider", "GET", "/api/v1/organizations/acme/projects", "outsider", nil, 404, "not_found", ""},
		{"get", "GET", "/api/v1/projects/WEB", "viewer", nil, 200, "", ""},
		{"get by outsider", "GET", "/api/v1/projects/WEB", "outsider", nil, 404, "not_found", `project "WEB" not found`},
		{"get another organization's", "GET", "/api/v1/projects/GLX", "admin", nil, 404, "not_found", `project "GLX" not found`},
		{"get unknown", "GET", "/api/v1/projects/NOPE", "admin", nil, 404, "not_found", `project "NOPE" not found`},
		{"update", "PATCH", "/api/v1/projects/WEB", "admin", map[string]any{"description": "The site"}, 200, "", ""},
		{"update by engineer", "PATCH", "/api/v1/projects/WEB", "engineer", map[string]any{"name": "Mine"}, 403, "forbidden", "project.update"},
		{"update by outsider", "PATCH", "/api/v1/projects/WEB", "outsider", map[string]any{"name": "Mine"}, 404, "not_found", ""},
		{"update unknown field", "PATCH", "/api/v1/projects/WEB", "admin", `{"key":"WWW"}`, 400, "invalid_argument", `unknown field "key"`},
		{"update nothing", "PATCH", "/api/v1/projects/WEB", "admin", `{}`, 400, "invalid_argument", "nothing to update"},
	})
	for who, want := range map[string][]string{"admin": {"API", "WEB"}, "viewer": {"WEB"}, "platform": {"API", "WEB"}} {
		if got := e.do("GET", "/api/v1/organizations/acme/projects", who, nil).expect(t, 200).listKeys(); !slices.Equal(got, want) {
			t.Errorf("%s lists %v, want %v", who, got, want)
		}
	}
	r := e.do("GET", "/api/v1/projects/WEB", "engineer", nil).expect(t, 200)
	if r.Body["description"] != "The site" || r.Body["name"] != "Web" {
		t.Fatalf("after update %s", r.Raw)
	}
	var n int
	if err := e.db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM events
		WHERE type IN ('project.created', 'project.updated') AND actor_subject = 'admin@example.com'`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("project events by admin: %d, %v", n, err)
	}
}

func TestRoleBindingsREST(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	orgBindings := "/api/v1/organizations/acme/role-bindings"
	webBindings := "/api/v1/projects/WEB/role-bindings"
	e.runCalls(t, []tenancyCall{
		{"bind at organization", "POST", orgBindings, "admin", map[string]any{"subject": "new@example.com", "role": "viewer"}, 201, "", ""},
		{"bind at project", "POST", orgBindings, "admin", map[string]any{"subject": "new@example.com", "role": "engineer", "project": "WEB"}, 201, "", ""},
		{"bind on the project", "POST", webBindings, "platform", map[string]any{"subject": "dev@example.com", "role": "approver"}, 201, "", ""},
		{"bind twice", "POST", webBindings, "admin", map[string]any{"subject": "dev@example.com", "role": "approver"}, 409, "already_exists", ""},
		{"invalid role", "POST", orgBindings, "admin", map[string]any{"subject": "x@example.com", "role": "owner"}, 400, "invalid_argument", `unknown role "owner"`},
		{"platform-admin in an organization", "POST", orgBindings, "admin", map[string]any{"subject": "x@example.com", "role": "platform-admin"}, 400, "invalid_argument", "platform scope"},
		{"another organization's project", "POST", orgBindings, "admin", map[string]any{"subject": "x@example.com", "role": "viewer", "project": "GLX"}, 400, "invalid_argument", `"GLX" is not a project of organization "acme"`},
		{"no subject", "POST", orgBindings, "admin", map[string]any{"role": "viewer"}, 400, "invalid_argument", "subject"},
		{"unknown field", "POST", orgBindings, "admin", `{"subject":"x@example.com","role":"viewer","scope":"org"}`, 400, "invalid_argument", `unknown field "scope"`},
		{"project given twice", "POST", webBindings, "admin", `{"subject":"x@example.com","role":"viewer","project":"WEB"}`, 400, "invalid_argument", `unknown field "project"`},
		{"viewer binds", "POST", orgBindings, "viewer", map[string]any{"subject": "x@example.com", "role": "viewer"}, 403, "forbidden", "role_binding.manage"},
		{"viewer binds on the project", "POST", webBindings, "viewer", map[string]any{"subject": "x@example.com", "role": "viewer"}, 403, "forbidden", "role_binding.manage"},
		{"engineer binds", "POST", webBindings, "engineer", map[string]any{"subject": "x@example.com", "role": "engineer"}, 403, "forbidden", "role_binding.manage"},
		{"outsider binds", "POST", orgBindings, "outsider", map[string]any{"subject": "x@example.com", "role": "viewer"}, 404, "not_found", ""},
		{"outsider binds on the project", "POST", webBindings, "outsider", map[string]any{"subject": "x@example.com", "role": "viewer"}, 404, "not_found", ""},
		{"list", "GET", orgBindings, "admin", nil, 200, "", ""},
		{"list on the project", "GET", webBindings, "engineer", nil, 200, "", ""},
		{"viewer lists", "GET", orgBindings, "viewer", nil, 403, "forbidden", "role_binding.read"},
		{"viewer lists on the project", "GET", webBindings, "viewer", nil, 403, "forbidden", "role_binding.read"},
		{"outsider lists", "GET", orgBindings, "outsider", nil, 404, "not_found", ""},
		{"outsider lists on the project", "GET", webBindings, "outsider", nil, 404, "not_found", ""},
	})

	list := func(path, who string) map[string]string { // subject/role → id
		items, _ := e.do("GET", path, who, nil).expect(t, 200).Body["items"].([]any)
		out := map[string]string{}
		for _, it := range items {
			b := it.(map[string]any)
			out[b["subject"].(string)+"/"+b["role"].(string)] = b["id"].(string)
		}
		return out
	}
	org := list(orgBindings, "admin")
	for _, k := range []string{"admin@example.com/organization-admin", "new@example.com/viewer", "new@example.com/engineer",
		"dev@example.com/approver", "viewer@example.com/viewer"} {
		if org[k] == "" {
			t.Errorf("organization list lacks %s: %v", k, org)
		}
	}
	if _, ok := org["outsider@example.com/organization-admin"]; ok {
		t.Errorf("organization list shows another organization's binding")
	}
	web := list(webBindings, "engineer")
	if web["new@example.com/engineer"] == "" || web["new@example.com/viewer"] != "" {
		t.Errorf("project list %v", web)
	}

	// A binding created over REST grants access at once; deleting it revokes it.
	tok, _, err := e.db.CreateAPIToken(context.Background(), "dev@example.com", "t", 0)
	if err != nil {
		t.Fatal(err)
	}
	e.tokens["dev"] = tok
	e.do("GET", "/api/v1/projects/WEB", "dev", nil).expect(t, 200)
	id := web["dev@example.com/approver"]
	e.runCalls(t, []tenancyCall{
		{"outsider deletes", "DELETE", "/api/v1/role-bindings/" + id, "outsider", nil, 404, "not_found", ""},
		{"viewer deletes", "DELETE", "/api/v1/role-bindings/" + id, "viewer", nil, 403, "forbidden", "role_binding.manage"},
		{"delete", "DELETE", "/api/v1/role-bindings/" + id, "admin", nil, 204, "", ""},
		{"delete again", "DELETE", "/api/v1/role-bindings/" + id, "admin", nil, 404, "not_found", ""},
		{"delete malformed id", "DELETE", "/api/v1/role-bindings/nope", "admin", nil, 404, "not_found", ""},
	})
	e.do("GET", "/api/v1/projects/WEB", "dev", nil).expect(t, 404)

	var created, deleted int
	if err := e.db.Pool().QueryRow(context.Background(), `SELECT
		count(*) FILTER (WHERE type = 'role_binding.created' AND actor_subject IN ('admin@example.com', 'platform@example.com')),
		count(*) FILTER (WHERE type = 'role_binding.deleted' AND actor_subject = 'admin@example.com' AND entity_id = $1)
		FROM events`, id).Scan(&created, &deleted); err != nil {
		t.Fatal(err)
	}
	if created != 3 || deleted != 1 {
		t.Fatalf("events: %d role_binding.created, %d role_binding.deleted; want 3, 1", created, deleted)
	}
}

func TestRoleBindingRefusalsWriteNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tables := []string{"role_bindings", "subjects", "events"}
	before := map[string]int{}
	for _, tb := range tables {
		before[tb] = e.countRows(t, tb)
	}
	e.runCalls(t, []tenancyCall{
		{"organization-admin at project scope", "POST", "/api/v1/organizations/acme/role-bindings", "admin",
			map[string]any{"subject": "fresh@example.com", "role": "organization-admin", "project": "WEB"}, 400, "invalid_argument", "project scope"},
		{"organization-admin on the project", "POST", "/api/v1/projects/WEB/role-bindings", "admin",
			map[string]any{"subject": "fresh@example.com", "role": "organization-admin"}, 400, "invalid_argument", "project scope"},
		{"platform-admin on the project", "POST", "/api/v1/projects/WEB/role-bindings", "platform",
			map[string]any{"subject": "fresh@example.com", "role": "platform-admin"}, 400, "invalid_argument", "platform scope"},
		{"invalid role", "POST", "/api/v1/projects/WEB/role-bindings", "admin",
			map[string]any{"subject": "fresh@example.com", "role": "root"}, 400, "invalid_argument", "role"},
		{"viewer", "POST", "/api/v1/organizations/acme/role-bindings", "viewer",
			map[string]any{"subject": "fresh@example.com", "role": "viewer"}, 403, "forbidden", ""},
	})
	for _, tb := range tables {
		if n := e.countRows(t, tb); n != before[tb] {
			t.Errorf("%s: %d rows after the refusals, %d before", tb, n, before[tb])
		}
	}
}
