package store_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
)

// kbFix is a database with organization acme (projects WEB and API), the
// other organization globex (project GLX), and callers of each role.
type kbFix struct {
	db                                     *store.DB
	org, other                             store.Organization
	web, api, glx                          store.Project
	admin, engineer, viewer, platform      store.Caller
	outsider, planner, apiEngineer, nobody store.Caller
}

func newKBFix(t *testing.T) *kbFix {
	t.Helper()
	ctx := context.Background()
	f := &kbFix{db: storetest.New(t)}
	sys := store.SystemActor()
	var err error
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	f.org, err = f.db.CreateOrganization(ctx, "acme", "Acme", sys)
	must(err)
	f.other, err = f.db.CreateOrganization(ctx, "globex", "Globex", sys)
	must(err)
	f.web, err = f.db.CreateProject(ctx, f.org.ID, "WEB", "Web", sys)
	must(err)
	f.api, err = f.db.CreateProject(ctx, f.org.ID, "API", "Api", sys)
	must(err)
	f.glx, err = f.db.CreateProject(ctx, f.other.ID, "GLX", "Globex", sys)
	must(err)
	caller := func(subject string, role store.Role, scope store.Scope) store.Caller {
		return store.HumanCaller(&store.Principal{Subject: subject, Kind: store.ActorHuman,
			Bindings: []store.RoleBinding{{Subject: subject, Role: role, Scope: scope}}})
	}
	orgScope := store.Scope{Kind: store.ScopeOrganization, OrganizationID: f.org.ID}
	webScope := store.Scope{Kind: store.ScopeProject, OrganizationID: f.org.ID, ProjectID: f.web.ID}
	f.admin = caller("admin", store.RoleOrganizationAdmin, orgScope)
	f.engineer = caller("engineer", store.RoleEngineer, webScope)
	f.viewer = caller("viewer", store.RoleViewer, webScope)
	f.apiEngineer = caller("api-engineer", store.RoleEngineer,
		store.Scope{Kind: store.ScopeProject, OrganizationID: f.org.ID, ProjectID: f.api.ID})
	f.platform = caller("root", store.RolePlatformAdmin, store.Scope{Kind: store.ScopePlatform})
	f.outsider = caller("outsider", store.RoleOrganizationAdmin, store.Scope{Kind: store.ScopeOrganization, OrganizationID: f.other.ID})
	f.nobody = store.HumanCaller(&store.Principal{Subject: "nobody", Kind: store.ActorHuman})
	f.planner = store.Caller{Principal: f.engineer.Principal, Actor: store.PlannerActor("s1", "engineer")}
	return f
}

// count returns the number of rows a query counts.
func (f *kbFix) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := f.db.Pool().QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (f *kbFix) events(t *testing.T, typ string) int {
	t.Helper()
	return f.count(t, `SELECT count(*) FROM events WHERE type = $1`, typ)
}

func wantCode(t *testing.T, err error, code store.Code, msg string) {
	t.Helper()
	if !store.IsCode(err, code) {
		t.Fatalf("err = %v, want %s", err, code)
	}
	if msg != "" && !strings.Contains(err.Error(), msg) {
		t.Fatalf("err = %q, want it to mention %q", err, msg)
	}
}

func TestSkillLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newKBFix(t)
	s, err := f.db.CreateSkill(ctx, f.admin, store.NewSkill{Name: "planner", Scope: "organization:acme",
		Description: "How to plan", Draft: "v1 body"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Scope != "organization:acme" || s.LatestVersion != 0 || s.CreatedBy != "admin" {
		t.Fatalf("created %+v", s)
	}
	v1, err := f.db.PublishSkill(ctx, f.admin, s.ID)
	if err != nil || v1.Version != 1 || v1.Body != "v1 body" {
		t.Fatalf("publish 1 = %+v, %v", v1, err)
	}
	draft := "v2 body"
	if s, err = f.db.UpdateSkillDraft(ctx, f.admin, s.ID, store.SkillDraftUpdate{Draft: &draft}); err != nil || s.Draft != draft {
		t.Fatalf("update = %+v, %v", s, err)
	}
	if v2, err := f.db.PublishSkill(ctx, f.admin, s.ID); err != nil || v2.Version != 2 {
		t.Fatalf("publish 2 = %+v, %v", v2, err)
	}
	vs, err := f.db.ListSkillVersions(ctx, f.viewer, s.ID)
	if err != nil || len(vs) != 2 || vs[0].Version != 2 || vs[0].Body != "" {
		t.Fatalf("versions = %+v, %v", vs, err)
	}
	got, err := f.db.GetSkillVersion(ctx, f.viewer, s.ID, 1)
	if err != nil || got.Body != "v1 body" {
		t.Fatalf("version 1 = %+v, %v (published versions must not change)", got, err)
	}
	_, err = f.db.GetSkillVersion(ctx, f.viewer, s.ID, 3)
	wantCode(t, err, store.CodeNotFound, "no version 3 (latest is 2)")
	if s, err = f.db.GetSkill(ctx, f.viewer, s.ID); err != nil || s.LatestVersion != 2 {
		t.Fatalf("get = %+v, %v", s, err)
	}
	for typ, want := range map[string]int{"skill.created": 1, "skill.updated": 1, "skill.published": 2} {
		if n := f.events(t, typ); n != want {
			t.Errorf("%s events = %d, want %d", typ, n, want)
		}
	}
}

func TestSkillRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newKBFix(t)
	if _, err := f.db.CreateSkill(ctx, f.admin, store.NewSkill{Name: "taken", Scope: "organization:acme", Draft: "x"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		caller store.Caller
		skill  store.NewSkill
		code   store.Code
		msg    string
	}{
		{"upper-case name", f.admin, store.NewSkill{Name: "Planner", Scope: "organization:acme"}, store.CodeInvalid, "name: must be 2-64"},
		{"one-letter name", f.admin, store.NewSkill{Name: "p", Scope: "organization:acme"}, store.CodeInvalid, "name:"},
		{"long name", f.admin, store.NewSkill{Name: strings.Repeat("a", 65), Scope: "organization:acme"}, store.CodeInvalid, "name:"},
		{"bad scope", f.admin, store.NewSkill{Name: "ok", Scope: "team:acme"}, store.CodeInvalid, "scope: must be"},
		{"long description", f.admin, store.NewSkill{Name: "ok", Scope: "organization:acme", Description: strings.Repeat("d", 1001)}, store.CodeInvalid, "description: at most 1000"},
		{"duplicate", f.admin, store.NewSkill{Name: "taken", Scope: "organization:acme"}, store.CodeAlreadyExists, `"taken" already exists`},
		{"viewer", f.viewer, store.NewSkill{Name: "ok", Scope: "project:WEB"}, store.CodeForbidden, "skill.write"},
		{"engineer", f.engineer, store.NewSkill{Name: "ok", Scope: "project:WEB"}, store.CodeForbidden, "skill.write"},
		{"org admin at platform", f.admin, store.NewSkill{Name: "ok", Scope: "platform"}, store.CodeForbidden, "platform scope"},
		{"outsider", f.outsider, store.NewSkill{Name: "ok", Scope: "organization:acme"}, store.CodeNotFound, `organization "acme" not found`},
		{"unknown project", f.admin, store.NewSkill{Name: "ok", Scope: "project:NOPE"}, store.CodeNotFound, `project "NOPE" not found`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			skills, events := f.count(t, `SELECT count(*) FROM skills`), f.count(t, `SELECT count(*) FROM events`)
			_, err := f.db.CreateSkill(ctx, tc.caller, tc.skill)
			wantCode(t, err, tc.code, tc.msg)
			if f.count(t, `SELECT count(*) FROM skills`) != skills || f.count(t, `SELECT count(*) FROM events`) != events {
				t.Fatal("a refused create wrote something")
			}
		})
	}
	s, _ := f.db.CreateSkill(ctx, f.admin, store.NewSkill{Name: "empty", Scope: "organization:acme"})
	_, err := f.db.PublishSkill(ctx, f.admin, s.ID)
	wantCode(t, err, store.CodeInvalid, "empty draft")
	_, err = f.db.PublishSkill(ctx, f.viewer, s.ID)
	wantCode(t, err, store.CodeForbidden, "skill.write")
	_, err = f.db.GetSkill(ctx, f.outsider, s.ID)
	wantCode(t, err, store.CodeNotFound, "not found")
	_, err = f.db.GetSkill(ctx, f.admin, "not-a-uuid")
	wantCode(t, err, store.CodeNotFound, "not found")
}

func TestSkillVisibility(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newKBFix(t)
	plat, err := f.db.CreateSkill(ctx, f.platform, store.NewSkill{Name: "planner", Scope: "platform", Draft: "p"})
	if err != nil {
		t.Fatal(err)
	}
	org, _ := f.db.CreateSkill(ctx, f.admin, store.NewSkill{Name: "style", Scope: "organization:acme", Draft: "s"})
	api, _ := f.db.CreateSkill(ctx, f.admin, store.NewSkill{Name: "api-only", Scope: "project:API", Draft: "a"})
	glx, _ := f.db.CreateSkill(ctx, f.outsider, store.NewSkill{Name: "globex", Scope: "organization:globex", Draft: "g"})
	for _, tc := range []struct {
		name   string
		caller store.Caller
		want   []string
	}{
		{"platform admin", f.platform, []string{plat.ID, org.ID, glx.ID, api.ID}},
		{"org admin", f.admin, []string{plat.ID, org.ID, api.ID}},
		{"viewer of WEB", f.viewer, []string{plat.ID, org.ID}},
		{"outsider", f.outsider, []string{plat.ID, glx.ID}},
		{"nobody", f.nobody, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			list, err := f.db.ListSkills(ctx, tc.caller, "")
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, s := range list {
				got = append(got, s.ID)
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("ids = %v, want %v", got, tc.want)
			}
		})
	}
	if _, err := f.db.GetSkill(ctx, f.viewer, api.ID); !store.IsCode(err, store.CodeForbidden) {
		t.Fatalf("viewer of WEB reading an API skill: %v, want forbidden", err)
	}
	if list, err := f.db.ListSkills(ctx, f.admin, "project:API"); err != nil || len(list) != 1 || list[0].ID != api.ID {
		t.Fatalf("scope filter = %+v, %v", list, err)
	}
	if list, err := f.db.ListSkills(ctx, f.viewer, "organization:acme"); err != nil || len(list) != 1 || list[0].ID != org.ID {
		t.Fatalf("viewer of WEB listing acme's skills = %+v, %v", list, err)
	}
	_, err = f.db.ListSkills(ctx, f.outsider, "organization:acme")
	wantCode(t, err, store.CodeNotFound, `organization "acme" not found`)
}

func TestEffectiveSkillsAndPins(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newKBFix(t)
	mk := func(c store.Caller, name, scope string, bodies ...string) store.Skill {
		t.Helper()
		s, err := f.db.CreateSkill(ctx, c, store.NewSkill{Name: name, Scope: scope})
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bodies {
			if _, err := f.db.UpdateSkillDraft(ctx, c, s.ID, store.SkillDraftUpdate{Draft: &b}); err != nil {
				t.Fatal(err)
			}
			if _, err := f.db.PublishSkill(ctx, c, s.ID); err != nil {
				t.Fatal(err)
			}
		}
		return s
	}
	mk(f.platform, "planner", "platform", "platform planner")
	mk(f.admin, "planner", "organization:acme", "acme planner")
	mk(f.admin, "review", "project:WEB") // never published: skipped
	mk(f.platform, "review", "platform", "platform review")
	mk(f.admin, "style", "organization:acme", "style 1", "style 2", "style 3")
	mk(f.admin, "lint", "project:WEB", "lint")
	mk(f.admin, "drift", "project:WEB", "drift 1", "drift 2")
	mk(f.outsider, "secret", "organization:globex", "globex only")
	pin := func(name string, spec store.SkillPinSpec) {
		t.Helper()
		if _, err := f.db.PinSkill(ctx, f.admin, "WEB", name, spec); err != nil {
			t.Fatal(err)
		}
	}
	v := func(n int) *int { return &n }
	pin("style", store.SkillPinSpec{Version: v(2)})
	pin("lint", store.SkillPinSpec{Disabled: true})
	pin("drift", store.SkillPinSpec{Version: v(9)})
	pin("ghost", store.SkillPinSpec{Version: v(1)})
	pin("review", store.SkillPinSpec{Version: v(0)})

	eff, err := f.db.ProjectSkills(ctx, f.viewer, "WEB")
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		scope             string
		version, resolved int
		problem           bool
	}
	want := map[string]row{
		"drift":   {"project:WEB", 0, 2, true},
		"ghost":   {"", 0, 0, true},
		"planner": {"organization:acme", 0, 1, false},
		"review":  {"platform", 0, 1, false},
		"style":   {"organization:acme", 2, 2, false},
	}
	if len(eff) != len(want) {
		t.Fatalf("effective = %+v, want names of %v", eff, want)
	}
	for _, e := range eff {
		w, ok := want[e.Name]
		if !ok || e.Scope != w.scope || e.Version != w.version || e.ResolvedVersion != w.resolved || (e.Problem != "") != w.problem {
			t.Errorf("%s = %+v, want %+v", e.Name, e, w)
		}
	}
	for _, tc := range []struct {
		name, body string
		version    int
		code       store.Code
	}{
		{"planner", "acme planner", 1, ""},
		{"style", "style 2", 2, ""},
		{"drift", "drift 2", 2, ""},
		{"ghost", "", 0, store.CodeNotFound},
		{"lint", "", 0, store.CodeNotFound},
		{"secret", "", 0, store.CodeNotFound},
	} {
		r, err := f.db.ResolveSkill(ctx, f.planner, "WEB", tc.name)
		if tc.code != "" {
			wantCode(t, err, tc.code, tc.name)
			continue
		}
		if err != nil || r.Body != tc.body || r.ResolvedVersion != tc.version {
			t.Errorf("resolve %s = %+v, %v", tc.name, r, err)
		}
	}
	pins, err := f.db.SkillPins(ctx, f.viewer, "WEB")
	if err != nil || len(pins) != 5 || pins[2].Name != "lint" || !pins[2].Disabled || pins[2].Version != nil {
		t.Fatalf("pins = %+v, %v", pins, err)
	}
	if err := f.db.UnpinSkill(ctx, f.admin, "WEB", "style"); err != nil {
		t.Fatal(err)
	}
	wantCode(t, f.db.UnpinSkill(ctx, f.admin, "WEB", "style"), store.CodeNotFound, "no pin")
	if r, _ := f.db.ResolveSkill(ctx, f.planner, "WEB", "style"); r.ResolvedVersion != 3 {
		t.Fatalf("unpinned style resolves to %d, want 3", r.ResolvedVersion)
	}
	for _, tc := range []struct {
		name   string
		caller store.Caller
		skill  string
		spec   store.SkillPinSpec
		code   store.Code
	}{
		{"viewer", f.viewer, "style", store.SkillPinSpec{Version: v(1)}, store.CodeForbidden},
		{"engineer", f.engineer, "style", store.SkillPinSpec{Version: v(1)}, store.CodeForbidden},
		{"outsider", f.outsider, "style", store.SkillPinSpec{Version: v(1)}, store.CodeNotFound},
		{"both", f.admin, "style", store.SkillPinSpec{Version: v(1), Disabled: true}, store.CodeInvalid},
		{"neither", f.admin, "style", store.SkillPinSpec{}, store.CodeInvalid},
		{"negative", f.admin, "style", store.SkillPinSpec{Version: v(-1)}, store.CodeInvalid},
		{"bad name", f.admin, "Style!", store.SkillPinSpec{Version: v(1)}, store.CodeInvalid},
	} {
		t.Run("pin "+tc.name, func(t *testing.T) {
			before := f.count(t, `SELECT count(*) FROM events WHERE type LIKE 'skill.%pinned'`)
			_, err := f.db.PinSkill(ctx, tc.caller, "WEB", tc.skill, tc.spec)
			wantCode(t, err, tc.code, "")
			if f.count(t, `SELECT count(*) FROM events WHERE type LIKE 'skill.%pinned'`) != before {
				t.Fatal("a refused pin appended an event")
			}
		})
	}
}

func TestConcurrentPublishAndKnowledgeUpdate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newKBFix(t)
	s, err := f.db.CreateSkill(ctx, f.admin, store.NewSkill{Name: "race", Scope: "project:WEB", Draft: "d"})
	if err != nil {
		t.Fatal(err)
	}
	k, err := f.db.CreateKnowledge(ctx, f.admin, "acme", store.NewKnowledge{Kind: "note", Title: "t", Body: "b"})
	if err != nil {
		t.Fatal(err)
	}
	const n = 8
	var wg sync.WaitGroup
	versions := make(chan int, n)
	updateErrs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			v, err := f.db.PublishSkill(ctx, f.admin, s.ID)
			if err != nil {
				t.Error(err)
				return
			}
			versions <- v.Version
		}()
		go func() {
			defer wg.Done()
			body := "concurrent"
			_, err := f.db.UpdateKnowledge(ctx, f.admin, "acme", k.ID, store.KnowledgeUpdate{Version: 1, Body: &body})
			updateErrs <- err
		}()
	}
	wg.Wait()
	close(versions)
	close(updateErrs)
	seen := map[int]bool{}
	for v := range versions {
		if seen[v] || v < 1 || v > n {
			t.Fatalf("version %d published twice or out of range", v)
		}
		seen[v] = true
	}
	ok := 0
	for err := range updateErrs {
		switch {
		case err == nil:
			ok++
		case !store.IsCode(err, store.CodeConflict):
			t.Fatalf("update: %v", err)
		}
	}
	if ok != 1 || f.count(t, `SELECT count(*) FROM knowledge_versions WHERE entry_id = $1`, k.ID) != 2 {
		t.Fatalf("%d updates at version 1 succeeded, want exactly 1", ok)
	}
}
