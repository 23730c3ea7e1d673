package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"testing"

	"github.com/balletplanner/ballet/api"
	"github.com/balletplanner/ballet/gateway/fakellm"
	"github.com/balletplanner/ballet/store"
)

// fakeEmbedModel is the model the vectors of these tests are stored under.
const fakeEmbedModel = "fake-embed"

// fakeEmbedder embeds in-process with fakellm.Embed, the vectors the fake
// model's /v1/embeddings answers; with fail set every call fails as a
// gateway that is down would.
type fakeEmbedder struct{ fail bool }

func (fakeEmbedder) Model() string { return fakeEmbedModel }

func (f fakeEmbedder) Embed(_ context.Context, texts []string) ([][]float32, error) {
	if f.fail {
		return nil, errors.New("llm: embeddings: 503 upstream unavailable")
	}
	out := make([][]float32, len(texts))
	for i, t := range texts {
		out[i] = fakellm.Embed(t)
	}
	return out, nil
}

// meter is a store.Embedders that records the scopes queries are metered to.
type meter struct {
	e      store.Embedder // what it gives every scope; nil turns the leg off
	mu     sync.Mutex
	scopes []store.EmbedScope
}

func (m *meter) embedders(organizationID, projectID string) store.Embedder {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.scopes = append(m.scopes, store.EmbedScope{OrganizationID: organizationID, ProjectID: projectID})
	return m.e
}

// take returns the scopes recorded since the last take.
func (m *meter) take() []store.EmbedScope {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.scopes
	m.scopes = nil
	return s
}

// vectorEnv is newEnv with entities that share concept words but no word
// with the queries of the tests, their vectors indexed with fakeEmbedder:
//
//	acme:   WEB-1 "Nightly downtime window", WEB-2 "Checkout flow", skill billing-checks
//	        (an invoice), knowledge "Release checklist" (ship)
//	globex: GLX-1 "Outage", skill outage-review, knowledge "Outage": the very words
//	        of the queries, so their vectors are the nearest of all.
func vectorEnv(t *testing.T) *env {
	t.Helper()
	ctx := context.Background()
	e := newEnv(t)
	e.kbItem(t, e.project.ID, "WEB", 1, "Nightly downtime window")
	e.kbItem(t, e.project.ID, "WEB", 2, "Checkout flow")
	e.kbItem(t, e.otherProject.ID, "GLX", 1, "Outage")
	for _, c := range []struct {
		who, path string
		body      map[string]any
	}{
		{"admin", "/api/v1/skills", map[string]any{"name": "billing-checks", "scope": "organization:acme",
			"description": "Checks before sending an invoice", "draft": "Verify the invoice total."}},
		{"outsider", "/api/v1/skills", map[string]any{"name": "outage-review", "scope": "organization:globex",
			"description": "Outage refund review", "draft": "Outage refund."}},
		{"admin", "/api/v1/organizations/acme/knowledge/entries", map[string]any{"kind": "decision",
			"title": "Release checklist", "body": "Steps before we ship."}},
		{"outsider", "/api/v1/organizations/globex/knowledge/entries", map[string]any{"kind": "note",
			"title": "Outage", "body": "Outage rollout."}},
	} {
		e.do("POST", c.path, c.who, c.body).expect(t, 201)
	}
	for _, s := range []store.EmbedScope{
		{OrganizationID: e.org.ID, ProjectID: e.project.ID}, {OrganizationID: e.org.ID},
		{OrganizationID: e.otherOrg.ID, ProjectID: e.otherProject.ID}, {OrganizationID: e.otherOrg.ID},
	} {
		for {
			n, err := e.db.IndexEmbedScope(ctx, fakeEmbedder{}, s, 100)
			if err != nil {
				t.Fatalf("index %+v: %v", s, err)
			}
			if n == 0 {
				break
			}
		}
	}
	return e
}

// withEmbedders is e served by a second api on the same database whose
// searches use es; e keeps its own api, without Embedders.
func (e *env) withEmbedders(t *testing.T, es store.Embedders) *env {
	t.Helper()
	h := *e
	h.restart(t, func(_ *testing.T, d *api.Deps, _ string) { d.Embedders = es })
	return &h
}

// searchReply is a search answer: its status, legs header and hits.
type searchReply struct {
	status int
	legs   string
	hits   []map[string]any
	raw    []byte
}

// search GETs path as who and decodes the hits of a 200.
func (e *env) search(t *testing.T, who, path string) searchReply {
	t.Helper()
	req, err := http.NewRequest("GET", "http://"+e.srv.Addr()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e.tokens[who])
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := searchReply{status: res.StatusCode, legs: res.Header.Get("Ballet-Search-Legs"), raw: raw}
	if r.status == 200 {
		var body struct{ Items []map[string]any }
		if err := json.Unmarshal(raw, &body); err != nil || body.Items == nil {
			t.Fatalf("GET %s: no items in %s (%v)", path, raw, err)
		}
		r.hits = body.Items
	}
	return r
}

// names are the hits' keys (items), names (skills) or titles (knowledge).
func (r searchReply) names() []string {
	var out []string
	for _, h := range r.hits {
		for _, f := range []string{"key", "name", "title"} {
			if s, _ := h[f].(string); s != "" {
				out = append(out, s)
				break
			}
		}
	}
	return out
}

const (
	lexicalLegs = "fulltext,trigram"
	hybridLegs  = "fulltext,trigram,vector"
)

func search(q string) string { return "/api/v1/search?q=" + url.QueryEscape(q) }

func knowledgeSearch(org, q string) string {
	return "/api/v1/organizations/" + org + "/knowledge/search?q=" + url.QueryEscape(q)
}

// TestSearchVectorLegREST: with Embedders, a query that shares no word
// with an item, a skill or a knowledge entry finds it through a concept
// word; without, it does not. Whatever the vectors, a caller sees only what
// it may read: acme's callers never get globex's entities, whose vectors
// are the nearest, and globex's admin never gets acme's.
func TestSearchVectorLegREST(t *testing.T) {
	t.Parallel()
	e := vectorEnv(t)
	m := &meter{e: fakeEmbedder{}}
	hybrid := e.withEmbedders(t, m.embedders)
	for _, tc := range []struct {
		name, who, path string
		first           string   // the first hit with the leg on ("" for any)
		has             string   // a hit the answer with the leg on holds
		lexical         []string // all hits without it
		never           []string // hits no answer may hold
		legs            string   // the legs header with Embedders
	}{
		{"item by concept", "viewer", search("outage") + "&kind=item", "WEB-1", "", nil, []string{"GLX-1"}, hybridLegs},
		{"item in a project", "engineer", search("outage") + "&project=WEB", "", "WEB-1", nil, []string{"GLX-1", "outage-review"}, hybridLegs},
		{"item and skill, organization admin", "admin", search("outage"), "", "WEB-1", nil, []string{"GLX-1", "outage-review"}, hybridLegs},
		{"skill by concept", "viewer", search("refund") + "&kind=skill", "billing-checks", "", nil, []string{"outage-review"}, hybridLegs},
		{"knowledge by concept", "viewer", knowledgeSearch("acme", "rollout"), "Release checklist", "", nil, []string{"Outage"}, hybridLegs},
		{"acme knowledge never globex's", "admin", knowledgeSearch("acme", "outage"), "", "", nil, []string{"Outage"}, hybridLegs},
		{"lexical hit kept", "viewer", search("downtime") + "&kind=item", "WEB-1", "", []string{"WEB-1"}, []string{"GLX-1"}, hybridLegs},
		{"outsider gets globex by concept, never acme's word match", "outsider", search("downtime") + "&kind=item",
			"GLX-1", "", nil, []string{"WEB-1"}, hybridLegs},
		{"outsider skill", "outsider", search("invoice") + "&kind=skill", "outage-review", "", nil, []string{"billing-checks"}, hybridLegs},
		{"outsider knowledge", "outsider", knowledgeSearch("globex", "ship"), "Outage", "", nil, []string{"Release checklist"}, hybridLegs},
		{"platform in a project", "platform", search("outage") + "&project=WEB&kind=item", "WEB-1", "", nil, []string{"GLX-1"}, hybridLegs},
		// A platform admin reads every organization: no one scope to meter
		// to, so the leg is off without a project.
		{"platform across organizations", "platform", search("outage") + "&kind=item", "GLX-1", "", []string{"GLX-1"}, []string{"WEB-1"}, lexicalLegs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			on := hybrid.search(t, tc.who, tc.path)
			off := e.search(t, tc.who, tc.path)
			if on.status != 200 || off.status != 200 {
				t.Fatalf("status %d with Embedders (%s), %d without (%s)", on.status, on.raw, off.status, off.raw)
			}
			if on.legs != tc.legs || off.legs != lexicalLegs {
				t.Errorf("legs %q with Embedders, %q without; want %q, %q", on.legs, off.legs, tc.legs, lexicalLegs)
			}
			if tc.first != "" && (len(on.hits) == 0 || on.names()[0] != tc.first) {
				t.Errorf("with Embedders: %v, want %s first", on.names(), tc.first)
			}
			if tc.has != "" && !slices.Contains(on.names(), tc.has) {
				t.Errorf("with Embedders: %v, want %s among them", on.names(), tc.has)
			}
			if got := off.names(); !slices.Equal(got, tc.lexical) {
				t.Errorf("without Embedders: %v, want %v", got, tc.lexical)
			}
			for _, r := range []searchReply{on, off} {
				for _, n := range r.names() {
					if slices.Contains(tc.never, n) {
						t.Errorf("%s may not see %s: %v", tc.who, n, r.names())
					}
				}
				for _, h := range r.hits {
					if s, _ := h["score"].(float64); s <= 0 || h["snippet"] == nil {
						t.Errorf("hit without score or snippet: %v", h)
					}
				}
			}
		})
	}
	// Refusals are the same with the leg on.
	for _, tc := range []struct {
		name, who, path string
		status          int
	}{
		{"other organization's project", "viewer", search("outage") + "&project=GLX", 404},
		{"other organization's knowledge", "admin", knowledgeSearch("globex", "outage"), 404},
		{"outsider in acme's knowledge", "outsider", knowledgeSearch("acme", "rollout"), 404},
		{"outsider in acme's project", "outsider", search("outage") + "&project=WEB", 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if r := hybrid.search(t, tc.who, tc.path); r.status != tc.status {
				t.Fatalf("status %d, want %d: %s", r.status, tc.status, r.raw)
			}
		})
	}
}
