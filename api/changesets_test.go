package api_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"
)

// proposal is a changeset body: an epic, a ticket in it that blocks WEB-1,
// and an update of WEB-1.
func proposal() map[string]any {
	return map[string]any{"title": "Auth", "summary": "Split the login work", "operations": []any{
		map[string]any{"kind": "create_item", "ref": "auth", "create": map[string]any{"kind": "epic", "title": "Auth"}},
		map[string]any{"kind": "create_item", "ref": "login", "create": map[string]any{"kind": "ticket", "title": "Login", "epic": "$auth"}},
		map[string]any{"kind": "add_dependency", "dependency": map[string]any{"from": "$login", "to": "WEB-1", "type": "blocks"}},
		map[string]any{"kind": "update_item", "update": map[string]any{"item": "WEB-1", "description": "after login"}},
	}}
}

func TestChangesetsHappyPath(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	mkItem(t, e, map[string]any{"kind": "ticket", "title": "Profile"}) // WEB-1
	cs := e.do("POST", "/api/v1/projects/WEB/changesets", "engineer", proposal()).expect(t, http.StatusCreated).Body
	id, _ := cs["id"].(string)
	if cs["status"] != "proposed" || cs["project"] != "WEB" || cs["results"] != nil || len(cs["operations"].([]any)) != 4 {
		t.Fatalf("proposed = %v", cs)
	}
	upd := cs["operations"].([]any)[3].(map[string]any)["update"].(map[string]any)
	if upd["version"] != 1.0 {
		t.Fatalf("update_item did not record the version: %v", upd)
	}
	r := e.do("GET", "/api/v1/projects/WEB/changesets?status=proposed", "viewer", nil).expect(t, http.StatusOK)
	if n := len(r.Body["items"].([]any)); n != 1 {
		t.Fatalf("proposed list = %s", r.Raw)
	}
	e.do("GET", "/api/v1/changesets/"+id, "viewer", nil).expect(t, http.StatusOK)

	r = e.do("POST", "/api/v1/changesets/"+id+"/apply", "engineer", map[string]any{"operations": []int{0, 1, 2, 3}}).
		expect(t, http.StatusOK)
	results := r.Body["results"].([]any)
	if r.Body["status"] != "applied" || len(results) != 4 ||
		results[0].(map[string]any)["item"] != "WEB-2" || results[1].(map[string]any)["item"] != "WEB-3" {
		t.Fatalf("applied = %s", r.Raw)
	}
	login := e.do("GET", "/api/v1/items/WEB-3", "viewer", nil).expect(t, http.StatusOK).Body
	if login["epic"] != "WEB-2" {
		t.Fatalf("login = %v", login)
	}
	deps := e.do("GET", "/api/v1/items/WEB-1/dependencies", "viewer", nil).expect(t, http.StatusOK)
	if !strings.Contains(string(deps.Raw), `"from":"WEB-3"`) {
		t.Fatalf("dependencies = %s", deps.Raw)
	}
	r = e.do("GET", "/api/v1/projects/WEB/changesets?status=applied", "viewer", nil).expect(t, http.StatusOK)
	if n := len(r.Body["items"].([]any)); n != 1 {
		t.Fatalf("applied list = %s", r.Raw)
	}

	// Reject: with and without a body.
	for _, body := range []any{nil, map[string]any{"reason": "later"}} {
		cs := e.do("POST", "/api/v1/projects/WEB/changesets", "engineer", map[string]any{"title": "More", "operations": []any{
			map[string]any{"kind": "create_item", "create": map[string]any{"kind": "ticket", "title": "x"}}}}).
			expect(t, http.StatusCreated).Body
		r := e.do("POST", "/api/v1/changesets/"+cs["id"].(string)+"/reject", "engineer", body).expect(t, http.StatusOK)
		if r.Body["status"] != "rejected" || r.Body["decided_by"] != "engineer@example.com" {
			t.Fatalf("rejected = %s", r.Raw)
		}
	}
}

func TestChangesetRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	mkItem(t, e, map[string]any{"kind": "ticket", "title": "Profile"}) // WEB-1
	pending := e.do("POST", "/api/v1/projects/WEB/changesets", "engineer", proposal()).expect(t, http.StatusCreated).Body["id"].(string)
	decided := e.do("POST", "/api/v1/projects/WEB/changesets", "engineer", proposal()).expect(t, http.StatusCreated).Body["id"].(string)
	e.do("POST", "/api/v1/changesets/"+decided+"/reject", "engineer", nil).expect(t, http.StatusOK)

	withOps := func(ops ...any) map[string]any { return map[string]any{"title": "t", "operations": ops} }
	create := func(ref, title string) map[string]any {
		return map[string]any{"kind": "create_item", "ref": ref, "create": map[string]any{"kind": "ticket", "title": title}}
	}
	tests := []struct {
		name, method, path, who string
		body                    any
		status                  int
		code, message           string
	}{
		{"unknown field", "POST", "/api/v1/projects/WEB/changesets", "engineer", `{"title":"t","operations":[],"author":"me"}`, 400, "invalid_argument", `unknown field "author"`},
		{"unknown field in operation", "POST", "/api/v1/projects/WEB/changesets", "engineer", `{"title":"t","operations":[{"kind":"create_item","create":{"kind":"ticket","title":"x","colour":"red"}}]}`, 400, "invalid_argument", `unknown field "colour"`},
		{"no operations", "POST", "/api/v1/projects/WEB/changesets", "engineer", withOps(), 400, "invalid_argument", "operations: must hold 1 to 200 operations, got 0"},
		{"title too long", "POST", "/api/v1/projects/WEB/changesets", "engineer", map[string]any{"title": strings.Repeat("t", 301), "operations": []any{create("", "x")}}, 400, "invalid_argument", "title: must be at most 300"},
		{"invalid enum in operation", "POST", "/api/v1/projects/WEB/changesets", "engineer", withOps(create("", "x"), map[string]any{"kind": "create_item", "create": map[string]any{"kind": "story", "title": "x"}}), 400, "invalid_argument", "operations[1]: kind: must be one of milestone, epic, ticket"},
		{"item title too long", "POST", "/api/v1/projects/WEB/changesets", "engineer", withOps(create("a", "x"), create("b", "y"), create("c", "z"), create("d", strings.Repeat("t", 301))), 400, "invalid_argument", "operations[3]: title: must be at most 300"},
		{"cycle", "POST", "/api/v1/projects/WEB/changesets", "engineer", withOps(create("a", "x"),
			map[string]any{"kind": "add_dependency", "dependency": map[string]any{"from": "$a", "to": "WEB-1", "type": "blocks"}},
			map[string]any{"kind": "add_dependency", "dependency": map[string]any{"from": "WEB-1", "to": "$a", "type": "blocks"}}), 400, "invalid_argument", "operations[2]: dependency cycle: WEB-1 → WEB-2 → WEB-1"},
		{"unknown ref", "POST", "/api/v1/projects/WEB/changesets", "engineer", withOps(map[string]any{"kind": "update_item", "update": map[string]any{"item": "$nope", "title": "x"}}), 400, "invalid_argument", "operations[0]: update.item: unknown reference $nope"},
		{"viewer proposes", "POST", "/api/v1/projects/WEB/changesets", "viewer", proposal(), 403, "forbidden", "tracker.write"},
		{"other organization proposes", "POST", "/api/v1/projects/WEB/changesets", "outsider", proposal(), 404, "not_found", "not found"},
		{"other organization reads", "GET", "/api/v1/changesets/" + pending, "outsider", nil, 404, "not_found", "not found"},
		{"other organization lists", "GET", "/api/v1/projects/WEB/changesets", "outsider", nil, 404, "not_found", "not found"},
		{"invalid status filter", "GET", "/api/v1/projects/WEB/changesets?status=open", "viewer", nil, 400, "invalid_argument", "status: must be one of proposed, applied, rejected"},
		{"unknown changeset", "GET", "/api/v1/changesets/not-an-id", "viewer", nil, 404, "not_found", "changeset not-an-id not found"},
		{"apply without operations", "POST", "/api/v1/changesets/" + pending + "/apply", "engineer", map[string]any{}, 400, "invalid_argument", "operations: required"},
		{"apply out of range", "POST", "/api/v1/changesets/" + pending + "/apply", "engineer", map[string]any{"operations": []int{0, 9}}, 400, "invalid_argument", "operations: index 9 is out of range"},
		{"apply ref not chosen", "POST", "/api/v1/changesets/" + pending + "/apply", "engineer", map[string]any{"operations": []int{1, 2}}, 400, "invalid_argument", "operations[1]: create.epic uses $auth, created by operations[0], which is not chosen"},
		{"apply unknown field", "POST", "/api/v1/changesets/" + pending + "/apply", "engineer", `{"operations":[0],"force":true}`, 400, "invalid_argument", `unknown field "force"`},
		{"viewer applies", "POST", "/api/v1/changesets/" + pending + "/apply", "viewer", map[string]any{"operations": []int{0}}, 403, "forbidden", "tracker.write"},
		{"approver rejects", "POST", "/api/v1/changesets/" + pending + "/reject", "approver", nil, 403, "forbidden", "tracker.write"},
		{"other organization applies", "POST", "/api/v1/changesets/" + pending + "/apply", "outsider", map[string]any{"operations": []int{0}}, 404, "not_found", "not found"},
		{"apply decided", "POST", "/api/v1/changesets/" + decided + "/apply", "engineer", map[string]any{"operations": []int{0}}, 409, "conflict", "is already rejected"},
		{"reject decided", "POST", "/api/v1/changesets/" + decided + "/reject", "engineer", nil, 409, "conflict", "is already rejected"},
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
}

func TestChangesetApplyStaleUpdateIsConflict(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	mkItem(t, e, map[string]any{"kind": "ticket", "title": "Profile"}) // WEB-1
	id := e.do("POST", "/api/v1/projects/WEB/changesets", "engineer", proposal()).expect(t, http.StatusCreated).Body["id"].(string)
	e.do("PATCH", "/api/v1/items/WEB-1", "admin", map[string]any{"version": 1, "description": "a human's edit"}).
		expect(t, http.StatusOK)
	before := trackerSnapshot(t, e)
	r := e.do("POST", "/api/v1/changesets/"+id+"/apply", "engineer", map[string]any{"operations": []int{0, 1, 2, 3}}).
		expect(t, http.StatusConflict)
	if r.errorCode() != "conflict" || !strings.Contains(r.message(),
		"operations[3]: WEB-1 has changed since the changeset was proposed (proposed against version 1, now version 2)") {
		t.Fatalf("stale apply = %s", r.Raw)
	}
	if trackerSnapshot(t, e) != before {
		t.Fatal("refused apply wrote something")
	}
	item := e.do("GET", "/api/v1/items/WEB-1", "viewer", nil).expect(t, http.StatusOK).Body
	if item["description"] != "a human's edit" {
		t.Fatalf("item = %v", item)
	}
}

func TestChangesetConcurrentApplyOneSucceeds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	mkItem(t, e, map[string]any{"kind": "ticket", "title": "Profile"}) // WEB-1
	id := e.do("POST", "/api/v1/projects/WEB/changesets", "engineer", proposal()).expect(t, http.StatusCreated).Body["id"].(string)
	const n = 4
	statuses := make([]int, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			who := []string{"engineer", "admin"}[i%2]
			statuses[i] = e.do("POST", "/api/v1/changesets/"+id+"/apply", who, map[string]any{"operations": []int{0, 1, 2, 3}}).Status
		}()
	}
	close(start)
	wg.Wait()
	ok, conflict := 0, 0
	for _, s := range statuses {
		switch s {
		case http.StatusOK:
			ok++
		case http.StatusConflict:
			conflict++
		}
	}
	if ok != 1 || conflict != n-1 {
		t.Fatalf("statuses = %v, want one 200 and the rest 409", statuses)
	}
	r := e.do("GET", "/api/v1/projects/WEB/items", "viewer", nil).expect(t, http.StatusOK)
	if got := strings.Join(listKeys(r), ","); got != "WEB-1,WEB-2,WEB-3" {
		t.Fatalf("items = %s: applied more than once", got)
	}
}
