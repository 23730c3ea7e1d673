package api_test

import (
	"slices"
	"testing"

	"github.com/balletplanner/ballet/store"
)

// TestSearchVectorMeteringREST: a query's embedding is metered to the
// project searched, else to the caller's one organization (the knowledge
// search always to its organization), never to another tenant; a caller
// reading several organizations embeds nothing without a project, and a
// refused search embeds nothing.
func TestSearchVectorMeteringREST(t *testing.T) {
	t.Parallel()
	e := vectorEnv(t)
	m := &meter{e: fakeEmbedder{}}
	hybrid := e.withEmbedders(t, m.embedders)
	acme, acmeWEB := store.EmbedScope{OrganizationID: e.org.ID}, store.EmbedScope{OrganizationID: e.org.ID, ProjectID: e.project.ID}
	globex := store.EmbedScope{OrganizationID: e.otherOrg.ID}
	// Sequential: the meter is shared.
	for _, tc := range []struct {
		name, who, path string
		status          int
		scopes          []store.EmbedScope // every scope metered (one or two calls: items and skills)
	}{
		{"project", "viewer", search("outage") + "&project=WEB", 200, []store.EmbedScope{acmeWEB}},
		{"project, items", "engineer", search("outage") + "&project=WEB&kind=item", 200, []store.EmbedScope{acmeWEB}},
		{"project binding, no project", "viewer", search("outage"), 200, []store.EmbedScope{acme}},
		{"organization admin", "admin", search("outage") + "&kind=skill", 200, []store.EmbedScope{acme}},
		{"platform in a project", "platform", search("outage") + "&project=WEB", 200, []store.EmbedScope{acmeWEB}},
		{"platform across organizations", "platform", search("outage"), 200, nil},
		{"knowledge", "viewer", knowledgeSearch("acme", "rollout"), 200, []store.EmbedScope{acme}},
		{"knowledge of a project", "engineer", knowledgeSearch("acme", "rollout") + "&project=WEB", 200, []store.EmbedScope{acme}},
		{"outsider", "outsider", search("outage"), 200, []store.EmbedScope{globex}},
		{"outsider knowledge", "outsider", knowledgeSearch("globex", "ship"), 200, []store.EmbedScope{globex}},
		{"refused: other organization's project", "viewer", search("outage") + "&project=GLX", 404, nil},
		{"refused: other organization's knowledge", "outsider", knowledgeSearch("acme", "rollout"), 404, nil},
		{"refused: bad query", "viewer", search(" "), 400, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m.take()
			if r := hybrid.search(t, tc.who, tc.path); r.status != tc.status {
				t.Fatalf("status %d, want %d: %s", r.status, tc.status, r.raw)
			}
			got := slices.Compact(m.take())
			if !slices.Equal(got, tc.scopes) {
				t.Fatalf("metered to %+v, want %+v", got, tc.scopes)
			}
		})
	}
}

// TestSearchVectorFailureREST: Embedders that fail, or give no Embedder,
// leave the lexical legs answering 200.
func TestSearchVectorFailureREST(t *testing.T) {
	t.Parallel()
	e := vectorEnv(t)
	for _, es := range []struct {
		name string
		m    *meter
	}{
		{"failing embedder", &meter{e: fakeEmbedder{fail: true}}},
		{"no embedder for the scope", &meter{}},
	} {
		t.Run(es.name, func(t *testing.T) {
			t.Parallel()
			h := e.withEmbedders(t, es.m.embedders)
			for _, tc := range []struct {
				who, path string
				hits      []string // sorted
			}{
				{"viewer", search("downtime") + "&kind=item", []string{"WEB-1"}},
				{"viewer", search("outage") + "&kind=item", nil},
				{"viewer", search("invoice") + "&kind=skill", []string{"billing-checks"}},
				{"viewer", knowledgeSearch("acme", "release"), []string{"Release checklist"}},
				{"viewer", knowledgeSearch("acme", "rollout"), nil},
				{"outsider", search("outage"), []string{"GLX-1", "outage-review"}},
			} {
				r := h.search(t, tc.who, tc.path)
				if r.status != 200 || r.legs != lexicalLegs {
					t.Fatalf("%s as %s: status %d, legs %q: %s", tc.path, tc.who, r.status, r.legs, r.raw)
				}
				got := r.names()
				slices.Sort(got)
				if !slices.Equal(got, tc.hits) {
					t.Errorf("%s as %s: %v, want %v", tc.path, tc.who, got, tc.hits)
				}
			}
			if len(es.m.take()) == 0 {
				t.Fatal("the store never asked the Embedders")
			}
		})
	}
}
