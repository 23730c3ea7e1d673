package tools_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/balletplanner/ballet/gateway/fakellm"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tools"
)

// fakeEmbedder embeds in-process with fakellm.Embed, the vectors of the
// fake model's /v1/embeddings, counting its calls; with fail set every call
// fails as a gateway that is down would.
type fakeEmbedder struct {
	fail  bool
	calls *atomic.Int64
}

func (fakeEmbedder) Model() string { return "fake-embed" }

func (f fakeEmbedder) Embed(_ context.Context, texts []string) ([][]float32, error) {
	if f.calls != nil {
		f.calls.Add(1)
	}
	if f.fail {
		return nil, errors.New("llm: embeddings: 503 upstream unavailable")
	}
	out := make([][]float32, len(texts))
	for i, t := range texts {
		out[i] = fakellm.Embed(t)
	}
	return out, nil
}

// vectorFixture is newFixture with entities that share only concept words
// with the tests' queries, and globex's entities made of the very words of
// the queries (their vectors the nearest), all embedded:
// "Nightly downtime window" (WEB), skill billing-checks (an invoice),
// knowledge "Release checklist" (ship); GLX "Outage", globex knowledge
// "Outage" (rollout).
func vectorFixture(t *testing.T) (*fixture, string) {
	t.Helper()
	ctx := context.Background()
	f := newFixture(t)
	item := f.item(t, store.NewItem{Kind: store.KindTicket, Title: "Nightly downtime window"})
	admin := store.HumanCaller(f.admin)
	sk := got(f.db.CreateSkill(ctx, admin, store.NewSkill{Name: "billing-checks", Scope: "organization:acme",
		Description: "Checks before sending an invoice", Draft: "Verify the invoice total."}))(t)
	got(f.db.PublishSkill(ctx, admin, sk.ID))(t)
	got(f.db.CreateKnowledge(ctx, store.HumanCaller(f.engineer), "acme", store.NewKnowledge{Kind: store.KnowledgeNote,
		Title: "Release checklist", Body: "Steps before we ship.", Projects: []string{"WEB"}}))(t)
	glx := store.HumanCaller(got(f.db.Principal(ctx, "glx@example.com"))(t))
	got(f.db.CreateItem(ctx, glx, "GLX", store.NewItem{Kind: store.KindTicket, Title: "Outage"}))(t)
	got(f.db.CreateKnowledge(ctx, glx, "globex", store.NewKnowledge{Kind: store.KnowledgeNote,
		Title: "Outage", Body: "Outage rollout."}))(t)
	for _, s := range []store.EmbedScope{
		{OrganizationID: f.org.ID, ProjectID: f.project.ID}, {OrganizationID: f.org.ID},
		{OrganizationID: f.other.OrganizationID, ProjectID: f.other.ID}, {OrganizationID: f.other.OrganizationID},
	} {
		for {
			n, err := f.db.IndexEmbedScope(ctx, fakeEmbedder{}, s, 100)
			if err != nil {
				t.Fatalf("index %+v: %v", s, err)
			}
			if n == 0 {
				break
			}
		}
	}
	return f, item.Key
}

// searchNames calls a search tool in env, which must succeed, and returns
// its results' keys (items), names (skills) or titles (knowledge).
func (f *fixture) searchNames(t *testing.T, env tools.Env, name, input string) []string {
	t.Helper()
	res := f.reg.Call(context.Background(), env, name, json.RawMessage(input))
	if res.IsError {
		t.Fatalf("%s(%s): error result %s", name, input, res.Text)
	}
	var out struct {
		Results []struct{ Key, Name, Title string }
		Count   int
	}
	if err := json.Unmarshal([]byte(res.Text), &out); err != nil || out.Count != len(out.Results) {
		t.Fatalf("%s: %s (%v)", name, res.Text, err)
	}
	names := []string{}
	for _, r := range out.Results {
		names = append(names, cmp.Or(r.Key, r.Name, r.Title))
	}
	return names
}

// TestSearchToolsVectorLeg: with an Embedder, search_project and
// search_knowledge rank first an entity that shares no word with the query
// but a concept; without one they do not find it; the session's scope holds
// (globex's nearest vectors never show); an Embedder that fails leaves the
// lexical results, not an error.
func TestSearchToolsVectorLeg(t *testing.T) {
	t.Parallel()
	f, downtime := vectorFixture(t)
	var calls atomic.Int64
	for _, tc := range []struct {
		name, tool, input string
		first             string   // the first result with the Embedder
		lexical           []string // every result without it, and with a failing one
	}{
		{"item", "search_project", `{"query":"outage","kind":"item"}`, downtime, []string{}},
		{"item or skill", "search_project", `{"query":"outage"}`, downtime, []string{}},
		{"word match kept", "search_project", `{"query":"downtime","kind":"item"}`, downtime, []string{downtime}},
		{"skill", "search_project", `{"query":"refund","kind":"skill"}`, "billing-checks", []string{}},
		{"knowledge", "search_knowledge", `{"query":"rollout"}`, "Release checklist", []string{}},
		{"knowledge by kind", "search_knowledge", `{"query":"rollout","kind":"note"}`, "Release checklist", []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, who := range []*store.Principal{f.engineer, f.viewer} {
				env := f.env(who)
				if got := f.searchNames(t, env, tc.tool, tc.input); !slices.Equal(got, tc.lexical) {
					t.Errorf("%s without an Embedder: %v, want %v", who.Subject, got, tc.lexical)
				}
				env.Embedder = fakeEmbedder{fail: true}
				if got := f.searchNames(t, env, tc.tool, tc.input); !slices.Equal(got, tc.lexical) {
					t.Errorf("%s with a failing Embedder: %v, want %v", who.Subject, got, tc.lexical)
				}
				env.Embedder = fakeEmbedder{calls: &calls}
				got := f.searchNames(t, env, tc.tool, tc.input)
				if len(got) == 0 || got[0] != tc.first {
					t.Errorf("%s with an Embedder: %v, want %s first", who.Subject, got, tc.first)
				}
				for _, n := range got {
					if n == "GLX-1" || n == "Outage" {
						t.Errorf("%s in WEB got globex's %s: %v", who.Subject, n, got)
					}
				}
			}
		})
	}
	t.Cleanup(func() {
		if calls.Load() == 0 {
			t.Error("no search embedded its query")
		}
	})
}
