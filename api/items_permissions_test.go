package api_test

import (
	"fmt"
	"net/http"
	"testing"
)

// TestTrackerPermissions walks every tracker and changeset endpoint × {no
// token, viewer, engineer, admin of another organization}.
func TestTrackerPermissions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	n := 0
	fresh := func() string { // a new backlog ticket, made by the org admin
		t.Helper()
		n++
		r := e.do("POST", "/api/v1/projects/WEB/items", "admin", map[string]any{"kind": "ticket", "title": fmt.Sprint("t", n)}).
			expect(t, http.StatusCreated)
		return r.Body["key"].(string)
	}
	changeset := func() string {
		t.Helper()
		r := e.do("POST", "/api/v1/projects/WEB/changesets", "admin", map[string]any{"title": "c", "operations": []any{
			map[string]any{"kind": "create_item", "create": map[string]any{"kind": "ticket", "title": "x"}}}}).
			expect(t, http.StatusCreated)
		return r.Body["id"].(string)
	}
	type req struct {
		method, path string
		body         any
	}
	tests := []struct {
		name string
		req  func() req
		// statuses for viewer and engineer; no token is 401, outsider 404.
		viewer, engineer int
	}{
		{"list items", func() req { return req{"GET", "/api/v1/projects/WEB/items", nil} }, 200, 200},
		{"create item", func() req {
			return req{"POST", "/api/v1/projects/WEB/items", map[string]any{"kind": "ticket", "title": "x"}}
		}, 403, 201},
		{"runnable", func() req { return req{"GET", "/api/v1/projects/WEB/runnable", nil} }, 200, 200},
		{"get item", func() req { return req{"GET", "/api/v1/items/" + fresh(), nil} }, 200, 200},
		{"patch item", func() req {
			return req{"PATCH", "/api/v1/items/" + fresh(), map[string]any{"version": 1, "title": "y"}}
		}, 403, 200},
		{"transition", func() req {
			return req{"POST", "/api/v1/items/" + fresh() + "/transition", map[string]any{"state": "ready", "version": 1}}
		}, 403, 200},
		{"history", func() req { return req{"GET", "/api/v1/items/" + fresh() + "/history", nil} }, 200, 200},
		{"list dependencies", func() req { return req{"GET", "/api/v1/items/" + fresh() + "/dependencies", nil} }, 200, 200},
		{"add dependency", func() req {
			return req{"POST", "/api/v1/items/" + fresh() + "/dependencies", map[string]any{"type": "blocks", "item": fresh()}}
		}, 403, 201},
		{"delete dependency", func() req {
			r := e.do("POST", "/api/v1/items/"+fresh()+"/dependencies", "admin", map[string]any{"type": "relates", "item": fresh()}).
				expect(t, http.StatusCreated)
			return req{"DELETE", "/api/v1/dependencies/" + r.Body["id"].(string), nil}
		}, 403, 204},
		{"list changesets", func() req { return req{"GET", "/api/v1/projects/WEB/changesets", nil} }, 200, 200},
		{"propose", func() req {
			return req{"POST", "/api/v1/projects/WEB/changesets", map[string]any{"title": "c", "operations": []any{
				map[string]any{"kind": "create_item", "create": map[string]any{"kind": "epic", "title": "x"}}}}}
		}, 403, 201},
		{"get changeset", func() req { return req{"GET", "/api/v1/changesets/" + changeset(), nil} }, 200, 200},
		{"apply", func() req {
			return req{"POST", "/api/v1/changesets/" + changeset() + "/apply", map[string]any{"operations": []int{0}}}
		}, 403, 200},
		{"reject", func() req { return req{"POST", "/api/v1/changesets/" + changeset() + "/reject", nil} }, 403, 200},
	}
	for _, tt := range tests {
		for _, c := range []struct {
			who    string
			status int
		}{{"", 401}, {"viewer", tt.viewer}, {"outsider", 404}, {"engineer", tt.engineer}} {
			t.Run(tt.name+"/"+c.who, func(t *testing.T) {
				r := tt.req()
				before := trackerSnapshot(t, e)
				e.do(r.method, r.path, c.who, r.body).expect(t, c.status)
				if c.status >= 400 && trackerSnapshot(t, e) != before {
					t.Fatal("refusal wrote something")
				}
			})
		}
	}
}
