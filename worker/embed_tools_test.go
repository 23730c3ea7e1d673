package worker_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"

	"github.com/balletplanner/ballet/gateway/fakellm"
	"github.com/balletplanner/ballet/store"
)

// scopedEmbedders is a store.Embedders of embedders built on
// fakellm.Embed, the vectors of the fake model's /v1/embeddings, that
// records the scope each embedder was asked for and the texts each
// embedded.
type scopedEmbedders struct {
	mu     sync.Mutex
	scopes []string            // "<org>:<project>" per Embedders call
	texts  map[string][]string // texts embedded, by scope
}

func (s *scopedEmbedders) embedders(org, project string) store.Embedder {
	scope := org + ":" + project
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scopes = append(s.scopes, scope)
	return scopedEmbedder{s: s, scope: scope}
}

func (s *scopedEmbedders) asked() ([]string, map[string][]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	texts := map[string][]string{}
	for k, v := range s.texts {
		texts[k] = slices.Clone(v)
	}
	return slices.Clone(s.scopes), texts
}

// scopedEmbedder is one embedder of scopedEmbedders, for one scope.
type scopedEmbedder struct {
	s     *scopedEmbedders
	scope string
}

func (scopedEmbedder) Model() string { return "fake-embed" }

func (e scopedEmbedder) Embed(_ context.Context, texts []string) ([][]float32, error) {
	e.s.mu.Lock()
	if e.s.texts == nil {
		e.s.texts = map[string][]string{}
	}
	e.s.texts[e.scope] = append(e.s.texts[e.scope], texts...)
	e.s.mu.Unlock()
	out := make([][]float32, len(texts))
	for i, t := range texts {
		out[i] = fakellm.Embed(t)
	}
	return out, nil
}

// searchOutage has the planner search the project for "outage" and end
// its turn when the result comes back.
const searchOutage = `
answers:
  - match: 'tool_result search_project'
    content:
      - text: "Searched."
  - match: '^find'
    content:
      - tool_use: {name: search_project, input: {query: outage, kind: item}}
`

// TestPlannerSearchEmbedsThroughDepsEmbedders: a planner turn's
// search_project call embeds its query with the embedder Deps.Embedders
// gives for the session's organization and project, and its result holds
// only the item near in meaning ("downtime" and "outage" are one concept
// of the fake), which shares no word with the query: not an unrelated one,
// nor an item of another project of the organization, nearer still.
func TestPlannerSearchEmbedsThroughDepsEmbedders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, searchOutage)
	e.plannerTools()
	near, err := e.db.CreateItem(ctx, e.human, "WEB", store.NewItem{Kind: store.KindTicket, Title: "Nightly downtime window"})
	must(t, err)
	far, err := e.db.CreateItem(ctx, e.human, "WEB", store.NewItem{Kind: store.KindTicket, Title: "Checkout redesign"})
	must(t, err)
	api, err := e.db.CreateProject(ctx, e.project.OrganizationID, "API", "Api", store.SystemActor())
	must(t, err)
	_, err = e.db.Pool().Exec(ctx, `
		INSERT INTO items (project_id, number, key, kind, title, description, state, type, review_mode, merge_mode, created_by)
		VALUES ($1, 1, 'API-1', 'ticket', 'Outage', 'outage', 'backlog', 'feature', 'agent', 'auto', 'test')`, api.ID)
	must(t, err)
	// The vectors, as the embed queue stores them (of the same model).
	indexer := &scopedEmbedders{}
	for _, p := range []store.Project{e.project, api} {
		s := store.EmbedScope{OrganizationID: p.OrganizationID, ProjectID: p.ID}
		for {
			n, err := e.db.IndexEmbedScope(ctx, indexer.embedders(s.OrganizationID, s.ProjectID), s, 64)
			must(t, err)
			if n == 0 {
				break
			}
		}
	}

	counting := &scopedEmbedders{}
	e.deps.Embedders = counting.embedders
	e.start()
	s := e.session()
	outs := e.waitDone(s, e.send(s, "find the outage tickets").Turn)

	scope := e.project.OrganizationID + ":" + e.project.ID
	scopes, texts := counting.asked()
	if len(scopes) == 0 || slices.ContainsFunc(scopes, func(s string) bool { return s != scope }) {
		t.Fatalf("Embedders asked for %v, want only the session's %s", scopes, scope)
	}
	if want := map[string][]string{scope: {"outage"}}; len(texts) != 1 || !slices.Equal(texts[scope], want[scope]) {
		t.Fatalf("embedded %v, want %v", texts, want)
	}
	rs := toolResults(outs)
	if len(rs) != 1 || rs[0].IsError {
		t.Fatalf("tool results %+v, want one search_project result", rs)
	}
	var res struct {
		Results []struct{ Kind, Key string }
		Count   int
	}
	must(t, json.Unmarshal([]byte(rs[0].Text), &res))
	var keys []string
	for _, r := range res.Results {
		keys = append(keys, r.Key)
	}
	if !slices.Equal(keys, []string{near.Key}) || res.Count != 1 {
		t.Fatalf("search_project found %v (count %d), want only %s: not %s (%q), not API-1", keys, res.Count, near.Key, far.Key, far.Title)
	}
}
