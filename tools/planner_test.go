package tools_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
	"github.com/balletplanner/ballet/tools"
)

const (
	engSubject    = "eng@example.com"
	viewerSubject = "viewer@example.com"
	adminSubject  = "admin@example.com"
)

// fixture is one organization (acme) with project WEB, another (globex)
// with GLX, an engineer and a viewer of WEB, an organization admin, a
// planner session, a small tracker, two published skills and a knowledge
// entry.
type fixture struct {
	db       *store.DB
	reg      *tools.Registry
	log      *recordingHandler
	org      store.Organization
	project  store.Project
	other    store.Project
	session  store.Session
	engineer *store.Principal
	viewer   *store.Principal
	admin    *store.Principal
	entry    store.KnowledgeEntry // linked to WEB
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	ctx := context.Background()
	f := &fixture{db: storetest.New(t), log: &recordingHandler{}}
	sys := store.SystemActor()
	var err error
	f.org = got(f.db.CreateOrganization(ctx, "acme", "Acme", sys))(t)
	f.project = got(f.db.CreateProject(ctx, f.org.ID, "WEB", "Web", sys))(t)
	globex := got(f.db.CreateOrganization(ctx, "globex", "Globex", sys))(t)
	f.other = got(f.db.CreateProject(ctx, globex.ID, "GLX", "Globex", sys))(t)
	web := store.Scope{Kind: store.ScopeProject, OrganizationID: f.org.ID, ProjectID: f.project.ID}
	got(f.db.CreateRoleBinding(ctx, engSubject, store.RoleEngineer, web, sys))(t)
	got(f.db.CreateRoleBinding(ctx, viewerSubject, store.RoleViewer, web, sys))(t)
	got(f.db.CreateRoleBinding(ctx, adminSubject, store.RoleOrganizationAdmin,
		store.Scope{Kind: store.ScopeOrganization, OrganizationID: f.org.ID}, sys))(t)
	got(f.db.CreateRoleBinding(ctx, "glx@example.com", store.RoleEngineer,
		store.Scope{Kind: store.ScopeOrganization, OrganizationID: globex.ID}, sys))(t)
	f.engineer = got(f.db.Principal(ctx, engSubject))(t)
	f.viewer = got(f.db.Principal(ctx, viewerSubject))(t)
	f.admin = got(f.db.Principal(ctx, adminSubject))(t)
	f.session = got(f.db.CreateSession(ctx, store.HumanCaller(f.engineer), "WEB", "Plan the login work"))(t)
	if f.reg, err = tools.Planner(slog.New(f.log)); err != nil {
		t.Fatal(err)
	}

	// Tracker: WEB-1 milestone, WEB-2 epic, WEB-3 and WEB-4 ready tickets
	// (WEB-3 blocks WEB-4), WEB-5 a backlog ticket.
	eng := store.HumanCaller(f.engineer)
	f.item(t, store.NewItem{Kind: store.KindMilestone, Title: "Beta launch"})
	f.item(t, store.NewItem{Kind: store.KindEpic, Title: "Authentication", Milestone: "WEB-1"})
	f.item(t, store.NewItem{Kind: store.KindTicket, Title: "Login form", Epic: "WEB-2",
		Description: "A login form with email and password.", AcceptanceCriteria: []string{"shows errors inline"}})
	f.item(t, store.NewItem{Kind: store.KindTicket, Title: "Password reset", Epic: "WEB-2", Type: "feature"})
	f.item(t, store.NewItem{Kind: store.KindTicket, Title: "Flaky checkout test", Type: "bug"})
	got(f.db.TransitionItem(ctx, eng, "WEB-3", store.StateReady, 1))(t)
	got(f.db.TransitionItem(ctx, eng, "WEB-4", store.StateReady, 1))(t)
	got(f.db.AddDependency(ctx, eng, "WEB-3", "WEB-4", store.DependencyBlocks))(t)

	// Skills: two published project skills, one never published.
	admin := store.HumanCaller(f.admin)
	for _, s := range []store.NewSkill{
		{Name: "planner", Scope: "project:WEB", Description: "How to plan in WEB", Draft: "# Planner\nSplit work into tickets of at most two days."},
		{Name: "estimation", Scope: "organization:acme", Description: "Estimating work", Draft: "# Estimation\nUse t-shirt sizes."},
	} {
		sk := got(f.db.CreateSkill(ctx, admin, s))(t)
		got(f.db.PublishSkill(ctx, admin, sk.ID))(t)
	}
	got(f.db.CreateSkill(ctx, admin, store.NewSkill{Name: "unpublished", Scope: "project:WEB", Draft: "draft"}))(t)

	f.entry = got(f.db.CreateKnowledge(ctx, eng, "acme", store.NewKnowledge{Kind: store.KnowledgeDecision,
		Title: "Sessions use signed cookies", Body: "We decided on signed cookies for login sessions.",
		Projects: []string{"WEB"}, Items: []string{"WEB-3"}}))(t)
	return f
}

func (f *fixture) item(t testing.TB, in store.NewItem) store.Item {
	t.Helper()
	return got(f.db.CreateItem(context.Background(), store.HumanCaller(f.engineer), "WEB", in))(t)
}

// env is the planner of the fixture's session acting for p in WEB.
func (f *fixture) env(p *store.Principal) tools.Env {
	return tools.Env{DB: f.db, Project: f.project, Session: f.session.ID,
		Caller: store.Caller{Principal: p, Actor: store.PlannerActor(f.session.ID, p.Subject)}}
}

func (f *fixture) call(t testing.TB, p *store.Principal, name, input string) tools.Result {
	t.Helper()
	res := f.reg.Call(context.Background(), f.env(p), name, json.RawMessage(input))
	if !json.Valid([]byte(res.Text)) {
		t.Fatalf("%s: result is not JSON: %s", name, res.Text)
	}
	return res
}

// ok calls a tool that must succeed and decodes its output.
func (f *fixture) ok(t testing.TB, p *store.Principal, name, input string) map[string]any {
	t.Helper()
	res := f.call(t, p, name, input)
	if res.IsError {
		t.Fatalf("%s(%s): error result %s", name, input, res.Text)
	}
	var out map[string]any
	if err := json.Unmarshal([]byte(res.Text), &out); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return out
}

// fails calls a tool that must fail with an error naming every want.
func (f *fixture) fails(t testing.TB, p *store.Principal, name, input string, want ...string) string {
	t.Helper()
	res := f.call(t, p, name, input)
	if !res.IsError {
		t.Fatalf("%s(%s): want an error result, got %s", name, input, res.Text)
	}
	var out struct{ Error string }
	if err := json.Unmarshal([]byte(res.Text), &out); err != nil || out.Error == "" {
		t.Fatalf("%s: error result without an error message: %s", name, res.Text)
	}
	for _, w := range want {
		if !strings.Contains(out.Error, w) {
			t.Errorf("%s(%s): error %q does not contain %q", name, input, out.Error, w)
		}
	}
	return out.Error
}

func (f *fixture) count(t testing.TB, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := f.db.Pool().QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// got fails the test on err and returns v: got(f())(t).
func got[T any](v T, err error) func(testing.TB) T {
	return func(t testing.TB) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// recordingHandler is a slog handler that remembers the messages logged,
// so that tests see panics and internal errors the registry absorbed.
type recordingHandler struct {
	mu   sync.Mutex
	msgs []string
}

func (h *recordingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordingHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *recordingHandler) WithGroup(string) slog.Handler            { return h }
func (h *recordingHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value); return true })
	h.mu.Lock()
	h.msgs = append(h.msgs, b.String())
	h.mu.Unlock()
	return nil
}

func (h *recordingHandler) messages() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.msgs)
}
