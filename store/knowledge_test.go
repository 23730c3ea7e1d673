package store_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/store"
)

// insertItem adds a ticket to a project with plain SQL (items belong to the
// tracker; knowledge and search only read them).
func insertItem(t testing.TB, db *store.DB, p store.Project, number int, title, description string) string {
	t.Helper()
	key := p.Key + "-" + strconv.Itoa(number)
	_, err := db.Pool().Exec(context.Background(), `
		INSERT INTO items (project_id, number, key, kind, title, description, state, type, review_mode, merge_mode, created_by)
		VALUES ($1, $2, $3, 'ticket', $4, $5, 'backlog', 'feature', 'agent', 'auto', 'test')`,
		p.ID, number, key, title, description)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func TestKnowledgeLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newKBFix(t)
	insertItem(t, f.db, f.web, 7, "Login page", "")
	k, err := f.db.CreateKnowledge(ctx, f.planner, "acme", store.NewKnowledge{Kind: store.KnowledgeDecision,
		Title: "Use OIDC", Body: "We chose OIDC.", Projects: []string{"WEB"}, Items: []string{"web-7"}})
	if err != nil {
		t.Fatal(err)
	}
	if k.Version != 1 || k.CreatedBy != "engineer" || k.UpdatedBy != "engineer" || k.Items[0] != "WEB-7" || k.OrganizationID != f.org.ID {
		t.Fatalf("created %+v (the planner records the human it acts for)", k)
	}
	title := "Use OIDC everywhere"
	k2, err := f.db.UpdateKnowledge(ctx, f.admin, "acme", k.ID, store.KnowledgeUpdate{Version: 1, Title: &title})
	if err != nil || k2.Version != 2 || k2.Title != title || k2.Body != k.Body || k2.UpdatedBy != "admin" || k2.CreatedBy != "engineer" {
		t.Fatalf("update = %+v, %v", k2, err)
	}
	body := "stale"
	_, err = f.db.UpdateKnowledge(ctx, f.engineer, "acme", k.ID, store.KnowledgeUpdate{Version: 1, Body: &body})
	wantCode(t, err, store.CodeConflict, "at version 2, not 1")
	var se *store.Error
	if !errors.As(err, &se) || se.Details["current_version"] != 2 {
		t.Fatalf("conflict details = %+v", se)
	}
	if got, _ := f.db.GetKnowledge(ctx, f.viewer, "acme", k.ID); got.Version != 2 || got.Body != k.Body {
		t.Fatalf("a stale update changed the entry: %+v", got)
	}
	vs, err := f.db.ListKnowledgeVersions(ctx, f.viewer, "acme", k.ID)
	if err != nil || len(vs) != 2 || vs[0].Version != 2 || vs[1].Title != "Use OIDC" {
		t.Fatalf("versions = %+v, %v", vs, err)
	}
	v1, err := f.db.GetKnowledgeVersion(ctx, f.viewer, "acme", k.ID, 1)
	if err != nil || v1.Title != "Use OIDC" || v1.Body != "We chose OIDC." || v1.UpdatedBy != "engineer" {
		t.Fatalf("version 1 = %+v, %v", v1, err)
	}
	_, err = f.db.GetKnowledgeVersion(ctx, f.viewer, "acme", k.ID, 3)
	wantCode(t, err, store.CodeNotFound, "no version 3")
	if n := f.events(t, "knowledge.created"); n != 1 {
		t.Errorf("knowledge.created = %d", n)
	}
	if n := f.count(t, `SELECT count(*) FROM events WHERE type = 'knowledge.updated' AND actor_subject = 'admin'`); n != 1 {
		t.Errorf("knowledge.updated = %d", n)
	}
	if n := f.count(t, `SELECT count(*) FROM events WHERE type = 'knowledge.created' AND acting_for = 'engineer'`); n != 1 {
		t.Errorf("the planner's event does not name the human it acts for")
	}
}

func TestKnowledgeRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newKBFix(t)
	insertItem(t, f.db, f.glx, 1, "Globex ticket", "")
	insertItem(t, f.db, f.api, 1, "API ticket", "")
	ok := store.NewKnowledge{Kind: "note", Title: "t", Body: "b", Projects: []string{"WEB"}}
	with := func(mod func(*store.NewKnowledge)) store.NewKnowledge { n := ok; mod(&n); return n }
	for _, tc := range []struct {
		name   string
		caller store.Caller
		org    string
		entry  store.NewKnowledge
		code   store.Code
		msg    string
	}{
		{"invalid kind", f.admin, "acme", with(func(n *store.NewKnowledge) { n.Kind = "memo" }), store.CodeInvalid, `kind: must be one of document, decision, note, debt, got "memo"`},
		{"title too long", f.admin, "acme", with(func(n *store.NewKnowledge) { n.Title = strings.Repeat("x", 301) }), store.CodeInvalid, "title: at most 300 characters, got 301"},
		{"blank title", f.admin, "acme", with(func(n *store.NewKnowledge) { n.Title = "  " }), store.CodeInvalid, "title: must not be empty"},
		{"unknown project", f.admin, "acme", with(func(n *store.NewKnowledge) { n.Projects = []string{"NOPE"} }), store.CodeInvalid, `unknown project "NOPE"`},
		{"other org's project", f.admin, "acme", with(func(n *store.NewKnowledge) { n.Projects = []string{"GLX"} }), store.CodeInvalid, `unknown project "GLX"`},
		{"other org's item", f.admin, "acme", with(func(n *store.NewKnowledge) { n.Items = []string{"GLX-1"} }), store.CodeInvalid, `unknown item "GLX-1"`},
		// A project the caller cannot read answers like an unknown one.
		{"item of an unreadable project", f.engineer, "acme", with(func(n *store.NewKnowledge) { n.Items = []string{"API-1"} }), store.CodeInvalid, `items: unknown item "API-1" in this organization`},
		{"unknown item", f.engineer, "acme", with(func(n *store.NewKnowledge) { n.Items = []string{"API-99"} }), store.CodeInvalid, `items: unknown item "API-99" in this organization`},
		{"unreadable project", f.engineer, "acme", with(func(n *store.NewKnowledge) { n.Projects = []string{"WEB", "API"} }), store.CodeInvalid, `projects: unknown project "API" in this organization`},
		{"viewer", f.viewer, "acme", ok, store.CodeForbidden, "knowledge.write"},
		{"engineer of another project", f.apiEngineer, "acme", ok, store.CodeInvalid, `projects: unknown project "WEB" in this organization`},
		{"engineer, no project link", f.engineer, "acme", with(func(n *store.NewKnowledge) { n.Projects = nil }), store.CodeForbidden, "link the entry"},
		{"outsider", f.outsider, "acme", ok, store.CodeNotFound, `organization "acme" not found`},
		{"no such organization", f.admin, "nope", ok, store.CodeNotFound, `organization "nope" not found`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows, events := f.count(t, `SELECT count(*) FROM knowledge_entries`), f.count(t, `SELECT count(*) FROM events`)
			_, err := f.db.CreateKnowledge(ctx, tc.caller, tc.org, tc.entry)
			wantCode(t, err, tc.code, tc.msg)
			if f.count(t, `SELECT count(*) FROM knowledge_entries`) != rows || f.count(t, `SELECT count(*) FROM events`) != events ||
				f.count(t, `SELECT count(*) FROM knowledge_versions`) != rows {
				t.Fatal("a refused create wrote something")
			}
		})
	}
	k, err := f.db.CreateKnowledge(ctx, f.engineer, "acme", ok)
	if err != nil {
		t.Fatalf("engineer linking their own project: %v", err)
	}
	title := "new"
	api := []string{"API"}
	for _, tc := range []struct {
		name   string
		caller store.Caller
		upd    store.KnowledgeUpdate
		code   store.Code
	}{
		{"no version", f.admin, store.KnowledgeUpdate{Title: &title}, store.CodeInvalid},
		{"no fields", f.admin, store.KnowledgeUpdate{Version: 1}, store.CodeInvalid},
		{"viewer", f.viewer, store.KnowledgeUpdate{Version: 1, Title: &title}, store.CodeForbidden},
		// A project the engineer cannot read is unknown to them.
		{"engineer moving it to a project they may not read", f.engineer, store.KnowledgeUpdate{Version: 1, Projects: &api}, store.CodeInvalid},
		{"outsider", f.outsider, store.KnowledgeUpdate{Version: 1, Title: &title}, store.CodeNotFound},
	} {
		t.Run("update "+tc.name, func(t *testing.T) {
			_, err := f.db.UpdateKnowledge(ctx, tc.caller, "acme", k.ID, tc.upd)
			wantCode(t, err, tc.code, "")
			if got, _ := f.db.GetKnowledge(ctx, f.admin, "acme", k.ID); got.Version != 1 {
				t.Fatal("a refused update changed the entry")
			}
		})
	}
	_, err = f.db.GetKnowledge(ctx, f.outsider, "acme", k.ID)
	wantCode(t, err, store.CodeNotFound, "not found")
	_, err = f.db.GetKnowledge(ctx, f.outsider, "globex", k.ID)
	wantCode(t, err, store.CodeNotFound, "knowledge entry")
}

func TestListKnowledgeFilters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newKBFix(t)
	insertItem(t, f.db, f.web, 1, "One", "")
	for _, n := range []store.NewKnowledge{
		{Kind: "document", Title: "Architecture", Body: "b", Projects: []string{"WEB", "API"}},
		{Kind: "decision", Title: "Pick Postgres", Body: "b", Projects: []string{"API"}},
		{Kind: "debt", Title: "Old login", Body: "b", Items: []string{"WEB-1"}},
	} {
		if _, err := f.db.CreateKnowledge(ctx, f.admin, "acme", n); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.db.CreateKnowledge(ctx, f.outsider, "globex", store.NewKnowledge{Kind: "note", Title: "Globex", Body: "b"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		filter store.KnowledgeFilter
		want   string
	}{
		{"all", store.KnowledgeFilter{}, "Old login,Pick Postgres,Architecture"},
		{"kind", store.KnowledgeFilter{Kind: "decision"}, "Pick Postgres"},
		{"project", store.KnowledgeFilter{Project: "api"}, "Pick Postgres,Architecture"},
		{"item", store.KnowledgeFilter{Item: "web-1"}, "Old login"},
		{"limit", store.KnowledgeFilter{Limit: 1}, "Old login"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			list, err := f.db.ListKnowledge(ctx, f.viewer, "acme", tc.filter)
			if err != nil {
				t.Fatal(err)
			}
			var titles []string
			for _, k := range list {
				titles = append(titles, k.Title)
			}
			if got := strings.Join(titles, ","); got != tc.want {
				t.Fatalf("titles = %s, want %s", got, tc.want)
			}
		})
	}
	_, err := f.db.ListKnowledge(ctx, f.viewer, "acme", store.KnowledgeFilter{Kind: "memo"})
	wantCode(t, err, store.CodeInvalid, "kind:")
	_, err = f.db.ListKnowledge(ctx, f.viewer, "acme", store.KnowledgeFilter{Limit: 500})
	wantCode(t, err, store.CodeInvalid, "limit:")
	_, err = f.db.ListKnowledge(ctx, f.nobody, "acme", store.KnowledgeFilter{})
	wantCode(t, err, store.CodeNotFound, "not found")
}
