package tools_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tools"
)

var twelve = []string{
	"create_knowledge", "get_item", "get_knowledge", "list_changesets", "list_items", "list_runnable",
	"list_skills", "propose_changeset", "read_skill", "search_knowledge", "search_project", "update_knowledge",
}

func TestPlannerDefinitions(t *testing.T) {
	t.Parallel()
	reg, err := tools.Planner(nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range reg.Definitions() {
		names = append(names, d.Name)
		if len(d.Description) < 80 {
			t.Errorf("%s: description too thin for the model: %q", d.Name, d.Description)
		}
		var s map[string]any
		if err := json.Unmarshal(d.InputSchema, &s); err != nil {
			t.Fatalf("%s: schema: %v", d.Name, err)
		}
		if s["type"] != "object" {
			t.Errorf("%s: input is not an object schema", d.Name)
		}
		// Every object in every schema refuses unknown properties, and no
		// schema offers a policy.
		walkSchema(s, d.Name, func(path string, node map[string]any) {
			if node["type"] == "object" && node["additionalProperties"] != false {
				t.Errorf("%s: object without additionalProperties: false", path)
			}
			if props, ok := node["properties"].(map[string]any); ok {
				if _, ok := props["policy"]; ok {
					t.Errorf("%s: offers a policy", path)
				}
			}
		})
	}
	// Exactly the twelve: no tool applies or rejects a changeset or sets a policy.
	if !slices.Equal(names, twelve) {
		t.Fatalf("tools = %v, want %v", names, twelve)
	}
	for _, n := range names {
		for _, bad := range []string{"apply", "reject", "policy", "delete", "transition"} {
			if strings.Contains(n, bad) {
				t.Errorf("tool %s may %s", n, bad)
			}
		}
	}
}

func walkSchema(node any, path string, visit func(string, map[string]any)) {
	switch n := node.(type) {
	case map[string]any:
		visit(path, n)
		for k, v := range n {
			walkSchema(v, path+"/"+k, visit)
		}
	case []any:
		for i, v := range n {
			walkSchema(v, fmt.Sprintf("%s/%d", path, i), visit)
		}
	}
}

func TestToolsHappyPath(t *testing.T) {
	t.Parallel()
	type out = map[string]any
	tests := []struct {
		name, tool, input string
		check             func(t *testing.T, f *fixture, o out)
	}{
		{"list_items all", "list_items", `{}`, func(t *testing.T, f *fixture, o out) {
			if keys(o["items"], "key") != "WEB-1 WEB-2 WEB-3 WEB-4 WEB-5" || o["total"] != 5.0 || o["truncated"] != nil {
				t.Fatalf("out = %v", o)
			}
			first := o["items"].([]any)[2].(map[string]any)
			if first["epic"] != "WEB-2" || first["state"] != "ready" || first["version"] != 2.0 || first["id"] != nil {
				t.Fatalf("item = %v", first)
			}
		}},
		{"list_items filtered", "list_items", `{"kind":"ticket","state":"ready","epic":"web-2"}`, func(t *testing.T, f *fixture, o out) {
			if keys(o["items"], "key") != "WEB-3 WEB-4" {
				t.Fatalf("out = %v", o)
			}
		}},
		{"list_items by milestone", "list_items", `{"milestone":"WEB-1"}`, func(t *testing.T, f *fixture, o out) {
			if keys(o["items"], "key") != "WEB-2" {
				t.Fatalf("out = %v", o)
			}
		}},
		{"get_item", "get_item", `{"key":"web-4"}`, func(t *testing.T, f *fixture, o out) {
			if o["key"] != "WEB-4" || o["title"] != "Password reset" || o["epic"] != "WEB-2" || o["version"] != 2.0 {
				t.Fatalf("out = %v", o)
			}
			bb := o["blocked_by"].([]any)[0].(map[string]any)
			if bb["key"] != "WEB-3" || bb["state"] != "ready" || o["id"] != nil {
				t.Fatalf("blocked_by = %v", o["blocked_by"])
			}
		}},
		{"get_item with blocks and criteria", "get_item", `{"key":"WEB-3"}`, func(t *testing.T, f *fixture, o out) {
			if fmt.Sprint(o["blocks"]) != "[WEB-4]" || fmt.Sprint(o["acceptance_criteria"]) != "[shows errors inline]" ||
				o["description"] != "A login form with email and password." {
				t.Fatalf("out = %v", o)
			}
		}},
		{"list_runnable", "list_runnable", `{}`, func(t *testing.T, f *fixture, o out) {
			// WEB-4 is ready but blocked by WEB-3.
			if keys(o["items"], "key") != "WEB-3" || o["total"] != 1.0 {
				t.Fatalf("out = %v", o)
			}
		}},
		{"search_project items", "search_project", `{"query":"login","kind":"item"}`, func(t *testing.T, f *fixture, o out) {
			r := o["results"].([]any)
			if len(r) == 0 || r[0].(map[string]any)["key"] != "WEB-3" || r[0].(map[string]any)["kind"] != "item" {
				t.Fatalf("out = %v", o)
			}
		}},
		{"search_project skills", "search_project", `{"query":"estimation sizes","kind":"skill"}`, func(t *testing.T, f *fixture, o out) {
			r := o["results"].([]any)
			if len(r) == 0 || r[0].(map[string]any)["name"] != "estimation" || r[0].(map[string]any)["scope"] != "organization:acme" {
				t.Fatalf("out = %v", o)
			}
		}},
		{"search_project both", "search_project", `{"query":"WEB-5"}`, func(t *testing.T, f *fixture, o out) {
			if !strings.Contains(keys(o["results"], "key"), "WEB-5") {
				t.Fatalf("out = %v", o)
			}
		}},
		{"list_changesets", "list_changesets", `{"status":"proposed"}`, func(t *testing.T, f *fixture, o out) {
			cs := o["changesets"].([]any)
			if len(cs) != 1 || o["total"] != 1.0 {
				t.Fatalf("out = %v", o)
			}
			c := cs[0].(map[string]any)
			if c["title"] != "Seeded" || c["proposed_by"] != engSubject ||
				fmt.Sprint(c["changes"]) != `[0: create ticket $a "Seeded ticket" 1: update WEB-5 (at version 1): title]` {
				t.Fatalf("changeset = %v", c)
			}
		}},
		{"propose_changeset", "propose_changeset", `{"title":"Add 2FA","summary":"Security review asked for it.","operations":[
			{"kind":"create_item","ref":"totp","create":{"kind":"ticket","title":"TOTP enrolment","epic":"WEB-2","type":"feature","acceptance_criteria":["QR code shown"]}},
			{"kind":"update_item","update":{"item":"WEB-4","version":2,"milestone":""}},
			{"kind":"add_dependency","dependency":{"from":"WEB-3","to":"$totp","type":"blocks"}}]}`,
			func(t *testing.T, f *fixture, o out) {
				if o["status"] != "proposed" || o["operations"] != 3.0 || o["id"] == "" {
					t.Fatalf("out = %v", o)
				}
				cs, err := f.db.GetChangeset(context.Background(), store.HumanCaller(f.engineer), o["id"].(string))
				if err != nil || cs.SessionID != f.session.ID || cs.ProposedBy != store.PlannerActor(f.session.ID, engSubject) {
					t.Fatalf("stored = %+v, %v", cs, err)
				}
				if n := f.count(t, `SELECT count(*) FROM items`); n != 5 {
					t.Fatalf("items = %d: a proposal changed the tracker", n)
				}
			}},
		{"list_skills", "list_skills", `{}`, func(t *testing.T, f *fixture, o out) {
			if keys(o["skills"], "name") != "estimation planner" || o["count"] != 2.0 {
				t.Fatalf("out = %v", o)
			}
		}},
		{"read_skill", "read_skill", `{"name":"planner"}`, func(t *testing.T, f *fixture, o out) {
			if o["version"] != 1.0 || !strings.Contains(o["body"].(string), "at most two days") || o["scope"] != "project:WEB" {
				t.Fatalf("out = %v", o)
			}
		}},
		{"search_knowledge", "search_knowledge", `{"query":"signed cookies","kind":"decision","limit":5}`, func(t *testing.T, f *fixture, o out) {
			r := o["results"].([]any)
			if len(r) != 1 || r[0].(map[string]any)["id"] != f.entry.ID || r[0].(map[string]any)["body"] != nil ||
				fmt.Sprint(r[0].(map[string]any)["items"]) != "[WEB-3]" || r[0].(map[string]any)["title"] != f.entry.Title {
				t.Fatalf("out = %v", o)
			}
		}},
		{"get_knowledge", "get_knowledge", ``, func(t *testing.T, f *fixture, o out) {
			if o["id"] != f.entry.ID || o["body"] != "We decided on signed cookies for login sessions." ||
				o["version"] != 1.0 || fmt.Sprint(o["items"]) != "[WEB-3]" || o["created_by"] != engSubject {
				t.Fatalf("out = %v", o)
			}
		}},
		{"create_knowledge", "create_knowledge", `{"kind":"debt","title":"Checkout tests are flaky","body":"They time out on CI.","items":["web-5"]}`,
			func(t *testing.T, f *fixture, o out) {
				if fmt.Sprint(o["projects"]) != "[WEB]" || fmt.Sprint(o["items"]) != "[WEB-5]" || o["version"] != 1.0 ||
					o["created_by"] != engSubject || o["updated_by"] != engSubject || o["body"] != nil {
					t.Fatalf("out = %v", o)
				}
				k, err := f.db.GetKnowledge(context.Background(), store.HumanCaller(f.engineer), "acme", o["id"].(string))
				if err != nil || k.Body != "They time out on CI." || k.Kind != store.KnowledgeDebt {
					t.Fatalf("stored = %+v, %v", k, err)
				}
			}},
		{"update_knowledge", "update_knowledge", ``, func(t *testing.T, f *fixture, o out) {
			if o["version"] != 2.0 || o["title"] != "Sessions use signed, rotating cookies" || o["updated_by"] != engSubject ||
				o["body"] != nil {
				t.Fatalf("out = %v", o)
			}
			k, err := f.db.GetKnowledge(context.Background(), store.HumanCaller(f.engineer), "acme", f.entry.ID)
			if err != nil || k.Body != f.entry.Body || fmt.Sprint(k.Items) != "[WEB-3 WEB-4]" {
				t.Fatalf("stored = %+v, %v", k, err)
			}
		}},
	}
	// Reading tools share one fixture; writing tools get their own.
	shared := newFixture(t)
	seedChangeset(t, shared)
	writes := map[string]bool{"propose_changeset": true, "create_knowledge": true, "update_knowledge": true}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := shared
			if writes[tc.tool] {
				f = newFixture(t)
			}
			input := tc.input
			switch tc.tool {
			case "get_knowledge":
				input = fmt.Sprintf(`{"id":%q}`, f.entry.ID)
			case "update_knowledge":
				input = fmt.Sprintf(`{"id":%q,"version":1,"title":"Sessions use signed, rotating cookies","items":["WEB-3","WEB-4"]}`, f.entry.ID)
			}
			tc.check(t, f, f.ok(t, f.engineer, tc.tool, input))
			f.noInternalErrors(t)
		})
	}
}

// seedChangeset proposes, as the engineer, a changeset for list_changesets.
func seedChangeset(t *testing.T, f *fixture) {
	t.Helper()
	_, err := f.db.ProposeChangeset(context.Background(), store.HumanCaller(f.engineer), "WEB", store.Proposal{
		Title: "Seeded", Operations: []store.Operation{
			{Kind: store.OpCreateItem, Ref: "a", Create: &store.NewItem{Kind: store.KindTicket, Title: "Seeded ticket"}},
			{Kind: store.OpUpdateItem, Update: &store.ItemUpdate{Item: "WEB-5", ItemPatch: store.ItemPatch{Title: ptr("Renamed")}}},
		}})
	if err != nil {
		t.Fatal(err)
	}
}

func ptr[T any](v T) *T { return &v }

// keys joins field of each object of a JSON list.
func keys(list any, field string) string {
	var out []string
	for _, e := range list.([]any) {
		if v, ok := e.(map[string]any)[field].(string); ok {
			out = append(out, v)
		}
	}
	return strings.Join(out, " ")
}

func (f *fixture) noInternalErrors(t testing.TB) {
	t.Helper()
	for _, m := range f.log.messages() {
		if strings.HasPrefix(m, "tool panicked") || strings.HasPrefix(m, "tool failed") {
			t.Errorf("logged: %s", m)
		}
	}
}

func TestListsAndBodiesAreCapped(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	for i := range 55 {
		f.item(t, store.NewItem{Kind: store.KindTicket, Title: fmt.Sprintf("Chore %d", i)})
	}
	o := f.ok(t, f.engineer, "list_items", `{}`)
	if len(o["items"].([]any)) != 50 || o["truncated"] != true || o["total"] != 60.0 || o["count"] != 50.0 ||
		!strings.Contains(o["note"].(string), "first 50 of 60") {
		t.Fatalf("list = count %v total %v truncated %v note %v", o["count"], o["total"], o["truncated"], o["note"])
	}
	long := strings.Repeat("é", 25000)
	k, err := f.db.CreateKnowledge(ctx, store.HumanCaller(f.engineer), "acme", store.NewKnowledge{
		Kind: store.KnowledgeDocument, Title: "Long", Body: long, Projects: []string{"WEB"}})
	if err != nil {
		t.Fatal(err)
	}
	o = f.ok(t, f.engineer, "get_knowledge", fmt.Sprintf(`{"id":%q}`, k.ID))
	if n := len([]rune(o["body"].(string))); n != 20000 || o["body_truncated"] != true || o["body_chars"] != 25000.0 ||
		!strings.Contains(o["note"].(string), "do not rewrite the body") {
		t.Fatalf("body runes %d, truncated %v, chars %v, note %v", n, o["body_truncated"], o["body_chars"], o["note"])
	}
	f.item(t, store.NewItem{Kind: store.KindTicket, Title: "Long one", Description: strings.Repeat("x", 30000)})
	o = f.ok(t, f.engineer, "get_item", `{"key":"WEB-61"}`)
	if len(o["description"].(string)) != 20000 || o["description_truncated"] != true || o["description_chars"] != 30000.0 {
		t.Fatalf("description truncated %v chars %v", o["description_truncated"], o["description_chars"])
	}
}

func TestViewerMayNotWrite(t *testing.T) {
	t.Parallel()
	tests := []struct{ tool, input string }{
		{"propose_changeset", `{"title":"x","operations":[{"kind":"create_item","create":{"kind":"ticket","title":"t"}}]}`},
		{"create_knowledge", `{"kind":"note","title":"n","body":"b"}`},
		{"update_knowledge", ``},
	}
	for _, tc := range tests {
		t.Run(tc.tool, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			input := tc.input
			if input == "" {
				input = fmt.Sprintf(`{"id":%q,"version":1,"title":"hijacked"}`, f.entry.ID)
			}
			before := f.count(t, `SELECT count(*) FROM events`)
			f.fails(t, f.viewer, tc.tool, input,
				"forbidden: the human you act for ("+viewerSubject+") may not do this", "needs")
			if n := f.count(t, `SELECT count(*) FROM changesets`); n != 0 {
				t.Errorf("changesets = %d", n)
			}
			if n := f.count(t, `SELECT count(*) FROM knowledge_entries`); n != 1 {
				t.Errorf("knowledge entries = %d", n)
			}
			if n := f.count(t, `SELECT version FROM knowledge_entries`); n != 1 {
				t.Errorf("knowledge version = %d", n)
			}
			if n := f.count(t, `SELECT count(*) FROM events`); n != before {
				t.Errorf("events %d → %d", before, n)
			}
			// The viewer may still read.
			f.ok(t, f.viewer, "list_items", `{}`)
			f.ok(t, f.viewer, "get_knowledge", fmt.Sprintf(`{"id":%q}`, f.entry.ID))
			f.noInternalErrors(t)
		})
	}
}

func TestInvalidInputRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	tests := []struct {
		tool, input string
		want        []string
	}{
		{"list_items", `{"kind":"ticket","sort":"title"}`, []string{"invalid input", "additional properties 'sort' not allowed"}},
		{"list_runnable", `{"project":"GLX"}`, []string{"'project' not allowed"}},
		{"get_item", `{}`, []string{"missing property 'key'"}},
		{"get_item", `{"key":"WEB-3","with":"deps"}`, []string{"'with' not allowed"}},
		{"get_item", `{"key":"'; DROP TABLE items; --"}`, []string{"/key", "does not match pattern"}},
		{"list_items", `{"kind":"story"}`, []string{"/kind"}},
		{"list_items", `{"kind":"ticket","state":"open"}`, []string{"invalid: state: must be one of"}},
		{"search_project", `{"query":"x","kind":"knowledge"}`, []string{"/kind"}},
		{"search_project", `{"query":"   "}`, []string{"query: must not be blank"}},
		{"search_project", `{"query":"--------------------------------------------------"}`, []string{"invalid: q: at most 16 terms"}},
		{"search_knowledge", `{"query":"lorem ipsum lorem ipsum lorem ipsum lorem ipsum lorem ipsum lorem ipsum lorem ipsum lorem ipsum lorem ipsum"}`,
			[]string{"invalid: q: at most 16 terms", "got 18"}},
		{"search_knowledge", `{"query":"x","limit":51}`, []string{"/limit"}},
		{"search_knowledge", `{"query":"x","limit":0}`, []string{"/limit"}},
		{"search_knowledge", `{"query":"x","project":"WEB"}`, []string{"'project' not allowed"}},
		{"read_skill", `{"name":"Planner!"}`, []string{"/name"}},
		{"create_knowledge", `{"kind":"note","title":"t","body":"b","projects":["GLX"]}`, []string{"'projects' not allowed"}},
		{"create_knowledge", `{"kind":"note","title":"t","body":"b\u0000"}`, []string{"body: must not contain NUL"}},
		{"create_knowledge", `{"kind":"note","title":"t","body":"b","items":["WEB-99"]}`, []string{"invalid: items: unknown item \"WEB-99\""}},
		{"update_knowledge", `{"id":"00000000-0000-0000-0000-000000000000","version":1}`, []string{"give at least one of kind, title, body, items"}},
		{"update_knowledge", `{"id":"x","version":1,"title":"t"}`, []string{"/id"}},
		{"list_changesets", `{"status":"open"}`, []string{"/status"}},
		{"propose_changeset", `{"title":"t","operations":[]}`, []string{"/operations", "minItems"}},
		{"propose_changeset", `{"title":"t","operations":[{"kind":"create_item","create":{"kind":"ticket","title":"t","estimate":3}}]}`,
			[]string{"/operations/0/create", "'estimate' not allowed"}},
		{"propose_changeset", `{"title":"t","operations":[{"kind":"update_item","create":{"kind":"ticket","title":"t"}}]}`,
			[]string{"/operations/0", "missing property 'update'"}},
		{"propose_changeset", `{"title":"t","operations":[{"kind":"add_dependency","dependency":{"from":"WEB-3","to":"WEB-4","type":"blocks"},"update":{"item":"WEB-3","title":"x"}}]}`,
			[]string{"/operations/0", "'update' not allowed"}},
		{"propose_changeset", `{"title":"t","operations":[{"kind":"update_item","update":{"item":"WEB-3"}}]}`,
			[]string{"/operations/0/update", "minProperties"}},
		{"propose_changeset", `{"title":"t","operations":[{"kind":"add_dependency","dependency":{"from":"WEB-4","to":"WEB-3","type":"blocks"}}]}`,
			[]string{"invalid: operations[0]:", "cycle"}},
		{"propose_changeset", `{"title":"t","operations":[{"kind":"update_item","update":{"item":"$nope","title":"x"}}]}`,
			[]string{"invalid: operations[0]: update.item: unknown reference $nope"}},
		{"propose_changeset", `{"title":"t","operations":[{"kind":"update_item","update":{"item":"WEB-3","version":1,"title":"x"}}]}`,
			[]string{"WEB-3", "version"}},
		{"get_item", `not json`, []string{"invalid input"}},
		{"get_item", `[1,2]`, []string{"invalid input"}},
	}
	for _, tc := range tests {
		f.fails(t, f.engineer, tc.tool, tc.input, tc.want...)
	}
	if n := f.count(t, `SELECT count(*) FROM changesets`); n != 0 {
		t.Errorf("changesets = %d", n)
	}
	f.noInternalErrors(t)
}

func TestNotFoundNamesWhat(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	glx, err := f.db.Principal(ctx, "glx@example.com")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.CreateItem(ctx, store.HumanCaller(glx), "GLX", store.NewItem{Kind: store.KindTicket, Title: "secret"}); err != nil {
		t.Fatal(err)
	}
	f.fails(t, f.engineer, "get_item", `{"key":"WEB-99"}`, "not found: item WEB-99 not found")
	// Another organization's item looks exactly like a missing one.
	f.fails(t, f.engineer, "get_item", `{"key":"GLX-1"}`, "not found: item GLX-1 not found")
	f.fails(t, f.engineer, "read_skill", `{"name":"unpublished"}`, "not found", "unpublished")
	f.fails(t, f.engineer, "get_knowledge", `{"id":"7b0c7c43-8d6b-4a53-9a43-0c9a0c0d7d11"}`,
		`not found: knowledge entry "7b0c7c43-8d6b-4a53-9a43-0c9a0c0d7d11" not found`)
	f.noInternalErrors(t)
}

func TestPolicyRefused(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, input string }{
		{"on create", `{"title":"t","operations":[{"kind":"create_item","create":{"kind":"ticket","title":"t","policy":{"review_mode":"agent+human"}}}]}`},
		{"on update", `{"title":"t","operations":[{"kind":"update_item","update":{"item":"WEB-3","policy":{"merge_mode":"manual"}}}]}`},
		{"empty policy", `{"title":"t","operations":[{"kind":"update_item","update":{"item":"WEB-3","title":"x","policy":{}}}]}`},
		{"on the operation", `{"title":"t","operations":[{"kind":"update_item","policy":"x","update":{"item":"WEB-3","title":"x"}}]}`},
		{"at the top", `{"title":"t","policy":{"merge_mode":"auto"},"operations":[{"kind":"update_item","update":{"item":"WEB-3","title":"x"}}]}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.fails(t, f.engineer, "propose_changeset", tc.input, "'policy' not allowed")
			if n := f.count(t, `SELECT count(*) FROM changesets`); n != 0 {
				t.Fatalf("changesets = %d", n)
			}
			if n := f.count(t, `SELECT count(*) FROM events WHERE type = 'changeset.proposed'`); n != 0 {
				t.Fatalf("events = %d", n)
			}
			it, err := f.db.GetItem(context.Background(), store.HumanCaller(f.engineer), "WEB-3")
			if err != nil || *it.Policy != (store.Policy{ReviewMode: "agent", MergeMode: "auto"}) {
				t.Fatalf("WEB-3 = %+v, %v", it.Policy, err)
			}
		})
	}
}

func TestUpdateKnowledgeConflict(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.entry.ID
	f.ok(t, f.engineer, "update_knowledge", fmt.Sprintf(`{"id":%q,"version":1,"body":"Signed cookies, rotated daily."}`, id))
	msg := f.fails(t, f.engineer, "update_knowledge", fmt.Sprintf(`{"id":%q,"version":1,"title":"stale"}`, id),
		"conflict:", "current version 2")
	t.Log(msg)
	o := f.ok(t, f.engineer, "get_knowledge", fmt.Sprintf(`{"id":%q}`, id))
	if o["title"] != "Sessions use signed cookies" || o["version"] != 2.0 {
		t.Fatalf("after the conflict: %v", o)
	}
	f.ok(t, f.engineer, "update_knowledge", fmt.Sprintf(`{"id":%q,"version":2,"title":"Signed, rotating cookies"}`, id))
	f.noInternalErrors(t)
}

func TestPlannerActsForTheHuman(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.ok(t, f.engineer, "propose_changeset", `{"title":"Docs","operations":[{"kind":"create_item","create":{"kind":"ticket","title":"Write the README","type":"docs"}}]}`)
	k := f.ok(t, f.engineer, "create_knowledge", `{"kind":"note","title":"README owner","body":"The web team owns it."}`)
	f.ok(t, f.engineer, "update_knowledge", fmt.Sprintf(`{"id":%q,"version":1,"kind":"decision"}`, k["id"]))

	rows, err := f.db.Pool().Query(context.Background(), `
		SELECT type, actor_kind, actor_subject, COALESCE(acting_for, '') FROM events
		WHERE type IN ('changeset.proposed', 'knowledge.created', 'knowledge.updated') ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var types []string
	planner := "planner:" + f.session.ID
	for rows.Next() {
		var typ, kind, subject, actingFor string
		if err := rows.Scan(&typ, &kind, &subject, &actingFor); err != nil {
			t.Fatal(err)
		}
		if typ == "knowledge.created" && subject == engSubject {
			continue // the fixture's own entry, written by the human
		}
		types = append(types, typ)
		if kind != store.ActorService || subject != planner || actingFor != engSubject {
			t.Errorf("%s: actor = %s %s for %q, want service %s for %s", typ, kind, subject, actingFor, planner, engSubject)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if strings.Join(types, " ") != "changeset.proposed knowledge.created knowledge.updated" {
		t.Fatalf("events = %v", types)
	}
	// Knowledge is authored by the human, not the planner.
	var createdBy, updatedBy string
	if err := f.db.Pool().QueryRow(context.Background(), `SELECT created_by, updated_by FROM knowledge_entries WHERE id = $1`,
		k["id"]).Scan(&createdBy, &updatedBy); err != nil {
		t.Fatal(err)
	}
	if createdBy != engSubject || updatedBy != engSubject {
		t.Fatalf("created_by %q, updated_by %q", createdBy, updatedBy)
	}
	// The changeset records who proposed it and for whom.
	var by, forWhom string
	if err := f.db.Pool().QueryRow(context.Background(), `SELECT proposed_by, proposed_acting_for FROM changesets`).
		Scan(&by, &forWhom); err != nil {
		t.Fatal(err)
	}
	if by != planner || forWhom != engSubject {
		t.Fatalf("proposed_by %q for %q", by, forWhom)
	}
}

func TestUnknownTool(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, name := range []string{"apply_changeset", "reject_changeset", "set_policy", ""} {
		f.fails(t, f.engineer, name, `{}`, "unknown tool", "list_items")
	}
}
