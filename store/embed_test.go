package store_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/balletplanner/ballet/gateway/fakellm"
	"github.com/balletplanner/ballet/store"
)

// fakeEmbedder embeds in process with fakellm.Embed, the vectors the fake
// gateway serves, under a model name; err makes every call fail.
type fakeEmbedder struct {
	model string
	err   error
	log   *embedLog
}

// embedLog records what an Embedders was asked for and what was embedded.
type embedLog struct {
	mu     sync.Mutex
	scopes []string // "<org>:<project>" per Embedders call
	texts  []string
	calls  []int // texts per Embed call
}

func (l *embedLog) scopesAsked() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.scopes)
}

func (e fakeEmbedder) Model() string { return e.model }

func (e fakeEmbedder) Embed(_ context.Context, texts []string) ([][]float32, error) {
	if e.log != nil {
		e.log.mu.Lock()
		e.log.texts = append(e.log.texts, texts...)
		e.log.calls = append(e.log.calls, len(texts))
		e.log.mu.Unlock()
	}
	if e.err != nil {
		return nil, e.err
	}
	out := make([][]float32, len(texts))
	for i, t := range texts {
		out[i] = fakellm.Embed(t)
	}
	return out, nil
}

// embeddersOf is an Embedders handing out e for every scope and logging
// the scopes asked for in log.
func embeddersOf(e fakeEmbedder, log *embedLog) store.Embedders {
	e.log = log
	return func(org, project string) store.Embedder {
		log.mu.Lock()
		log.scopes = append(log.scopes, org+":"+project)
		log.mu.Unlock()
		return e
	}
}

// indexAll takes and indexes every dirty scope, as the embed tasks do,
// and returns how many entities it embedded.
func indexAll(t *testing.T, db *store.DB, e store.Embedder) int {
	t.Helper()
	ctx := context.Background()
	total := 0
	for {
		scopes, err := db.DirtyEmbedScopes(ctx, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(scopes) == 0 {
			return total
		}
		for _, s := range scopes {
			if _, err := db.TakeEmbedScope(ctx, s); err != nil {
				t.Fatal(err)
			}
			for {
				n, err := db.IndexEmbedScope(ctx, e, s, 3)
				if err != nil {
					t.Fatalf("index %+v: %v", s, err)
				}
				if n == 0 {
					break
				}
				total += n
			}
		}
	}
}

// semanticFix is searchFix plus entities that only the semantic leg finds
// for "outage": their texts use other words of its concept group.
func semanticFix(t *testing.T) *kbFix {
	t.Helper()
	ctx := context.Background()
	f := searchFix(t)
	for _, p := range []store.Project{f.web, f.api, f.glx} {
		insertItem(t, f.db, p, 30, "Checkout downtime on Friday", "The shop was unavailable for an hour.")
	}
	for _, sk := range []struct {
		c     store.Caller
		name  string
		scope string
	}{
		{f.admin, "incident-review", "project:WEB"},
		{f.admin, "postmortem-writing", "organization:acme"},
		{f.outsider, "globex-postmortem", "organization:globex"},
		{f.platform, "platform-postmortem", "platform"},
	} {
		if _, err := f.db.CreateSkill(ctx, sk.c, store.NewSkill{Name: sk.name, Scope: sk.scope,
			Description: "Write up a disruption", Draft: "When the service was unavailable, write what happened."}); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []struct {
		c   store.Caller
		org string
	}{{f.admin, "acme"}, {f.outsider, "globex"}} {
		if _, err := f.db.CreateKnowledge(ctx, k.c, k.org, store.NewKnowledge{Kind: "note",
			Title: "Downtime postmortem " + k.org, Body: "The service was unavailable."}); err != nil {
			t.Fatal(err)
		}
	}
	indexAll(t, f.db, fakeEmbedder{model: "m1"})
	return f
}

func hitKeys(hits []store.SearchHit) string {
	keys := keysOf(hits)
	slices.Sort(keys)
	return strings.Join(keys, ",")
}

// TestSemanticLegFindsMeaning: "outage" shares no word or trigram with
// the texts above; only the vector leg finds them, metered where the
// contract says.
func TestSemanticLegFindsMeaning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := semanticFix(t)
	for _, tc := range []struct {
		name   string
		caller store.Caller
		q      store.SearchQuery
		want   string // sorted keys and names with the leg on
		meter  string // the scope the query embedding was metered to; "" = none asked
		others bool   // the leg is off: nothing found
	}{
		{"viewer of WEB", f.viewer, store.SearchQuery{Q: "outage"}, "WEB-30,incident-review,postmortem-writing", "acme:", false},
		{"engineer of API", f.apiEngineer, store.SearchQuery{Q: "outage", Kind: "item"}, "API-30", "acme:", false},
		{"org admin", f.admin, store.SearchQuery{Q: "outage", Kind: "item"}, "API-30,WEB-30", "acme:", false},
		{"org admin, project", f.admin, store.SearchQuery{Q: "outage", Project: "WEB"}, "WEB-30,incident-review,postmortem-writing", "acme:" + f.web.ID, false},
		{"other organization", f.outsider, store.SearchQuery{Q: "outage"}, "GLX-30,globex-postmortem", "globex:", false},
		{"platform admin, project", f.platform, store.SearchQuery{Q: "outage", Project: "GLX", Kind: "item"}, "GLX-30", "globex:" + f.glx.ID, false},
		{"platform admin, no project", f.platform, store.SearchQuery{Q: "outage"}, "", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hits, err := f.db.Search(ctx, tc.caller, tc.q)
			if err != nil || len(hits) != 0 {
				t.Fatalf("leg off: %v, %v; want nothing", keysOf(hits), err)
			}
			log := &embedLog{}
			tc.q.Embedders = embeddersOf(fakeEmbedder{model: "m1"}, log)
			hits, err = f.db.Search(ctx, tc.caller, tc.q)
			if err != nil {
				t.Fatal(err)
			}
			if got := hitKeys(hits); got != tc.want {
				t.Fatalf("leg on: hits = %s, want %s", got, tc.want)
			}
			want := []string(nil)
			if tc.meter != "" {
				want = []string{strings.NewReplacer("acme", f.org.ID, "globex", f.other.ID).Replace(tc.meter)}
			}
			if got := log.scopesAsked(); !slices.Equal(got, want) {
				t.Fatalf("metered to %v, want %v", got, want)
			}
		})
	}
	// Knowledge: metered to the organization; the other organization's
	// entry never ranks.
	log := &embedLog{}
	kh, err := f.db.SearchKnowledge(ctx, f.viewer, "acme", store.KnowledgeSearch{Q: "outage", Embedders: embeddersOf(fakeEmbedder{model: "m1"}, log)})
	if err != nil || len(kh) != 1 || kh[0].Title != "Downtime postmortem acme" {
		t.Fatalf("knowledge: %+v, %v", kh, err)
	}
	if got := log.scopesAsked(); !slices.Equal(got, []string{f.org.ID + ":"}) {
		t.Fatalf("knowledge metered to %v", got)
	}
	if kh, _ := f.db.SearchKnowledge(ctx, f.viewer, "acme", store.KnowledgeSearch{Q: "outage"}); len(kh) != 0 {
		t.Fatalf("knowledge without the leg: %+v", kh)
	}
}

// TestSemanticLegOffWhenEmbeddingFails: an Embedders returning nil, or an
// embedder that fails, leaves the lexical results and no error.
func TestSemanticLegOffWhenEmbeddingFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := semanticFix(t)
	failing := fakeEmbedder{model: "m1", err: errors.New("gateway: 503 over budget")}
	for _, tc := range []struct {
		name string
		es   store.Embedders
	}{
		{"failing embedder", embeddersOf(failing, &embedLog{})},
		{"no embedder for the scope", func(string, string) store.Embedder { return nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hits, err := f.db.Search(ctx, f.viewer, store.SearchQuery{Q: "downtime", Kind: "item", Embedders: tc.es})
			if err != nil || hitKeys(hits) != "WEB-30" {
				t.Fatalf("hits = %v, %v; want the lexical WEB-30", keysOf(hits), err)
			}
			hits, err = f.db.Search(ctx, f.viewer, store.SearchQuery{Q: "outage", Embedders: tc.es})
			if err != nil || len(hits) != 0 {
				t.Fatalf("hits = %v, %v; want none", keysOf(hits), err)
			}
			kh, err := f.db.SearchKnowledge(ctx, f.viewer, "acme", store.KnowledgeSearch{Q: "downtime", Embedders: tc.es})
			if err != nil || len(kh) != 1 {
				t.Fatalf("knowledge = %+v, %v", kh, err)
			}
		})
	}
}

// TestEmbeddingModelChange: vectors of another model never rank, and
// indexing with the new model re-embeds every entity of the scope.
func TestEmbeddingModelChange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := semanticFix(t)
	m2 := fakeEmbedder{model: "m2"}
	q := store.SearchQuery{Q: "outage", Kind: "item", Project: "WEB", Embedders: embeddersOf(m2, &embedLog{})}
	if hits, err := f.db.Search(ctx, f.viewer, q); err != nil || len(hits) != 0 {
		t.Fatalf("m2 query over m1 vectors: %v, %v", keysOf(hits), err)
	}
	cur, other, err := f.db.EmbeddingCounts(ctx, "m2")
	if err != nil || cur != 0 || other == 0 {
		t.Fatalf("counts before = %d, %d, %v", cur, other, err)
	}
	web := store.EmbedScope{OrganizationID: f.org.ID, ProjectID: f.web.ID}
	n, err := f.db.IndexEmbedScope(ctx, m2, web, 100)
	// WEB: 7 items and one project skill.
	if err != nil || n != 8 {
		t.Fatalf("re-embedded %d, %v; want 8", n, err)
	}
	if hits, err := f.db.Search(ctx, f.viewer, q); err != nil || hitKeys(hits) != "WEB-30" {
		t.Fatalf("after re-embedding: %v, %v", keysOf(hits), err)
	}
	cur, other2, err := f.db.EmbeddingCounts(ctx, "m2")
	if err != nil || cur != 8 || other2 != other-8 {
		t.Fatalf("counts after = %d, %d, %v; want 8, %d", cur, other2, err, other-8)
	}
}

// TestIndexEmbedScope: one call embeds every stale entity in calls of at
// most batch texts, bounded texts, changed and deleted entities.
func TestIndexEmbedScope(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newKBFix(t)
	for n := 1; n <= 5; n++ {
		insertItem(t, f.db, f.web, n, "Item", strings.Repeat("long text ", 2000))
	}
	insertItem(t, f.db, f.api, 1, "Elsewhere", "")
	log := &embedLog{}
	e := fakeEmbedder{model: "m1", log: log}
	web := store.EmbedScope{OrganizationID: f.org.ID, ProjectID: f.web.ID}
	var got []int
	for range 3 {
		n, err := f.db.IndexEmbedScope(ctx, e, web, 2)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, n)
	}
	if !slices.Equal(got, []int{5, 0, 0}) || !slices.Equal(log.calls, []int{2, 2, 1}) {
		t.Fatalf("calls returned %v, embedded in calls of %v; want [5 0 0] in [2 2 1]", got, log.calls)
	}
	for _, text := range log.texts {
		if n := len([]rune(text)); n > 8000 {
			t.Fatalf("sent %d characters", n)
		}
	}
	if n := f.count(t, `SELECT count(*) FROM search_embeddings WHERE project_id = $1`, f.api.ID); n != 0 {
		t.Fatalf("indexing WEB embedded %d API items", n)
	}
	// A change re-embeds that item only; a change past the bound nothing.
	mustExec(t, f.db, `UPDATE items SET title = 'Renamed' WHERE key = 'WEB-1'`)
	mustExec(t, f.db, `UPDATE items SET description = description || 'tail' WHERE key = 'WEB-2'`)
	if n, err := f.db.IndexEmbedScope(ctx, e, web, 10); err != nil || n != 1 {
		t.Fatalf("after an edit: %d, %v; want 1", n, err)
	}
	mustExec(t, f.db, `DELETE FROM items WHERE key = 'WEB-3'`)
	if n, err := f.db.IndexEmbedScope(ctx, e, web, 10); err != nil || n != 0 {
		t.Fatalf("after a delete: %d, %v", n, err)
	}
	if n := f.count(t, `SELECT count(*) FROM search_embeddings WHERE project_id = $1`, f.web.ID); n != 4 {
		t.Fatalf("vectors of WEB = %d, want 4", n)
	}
	for _, tc := range []struct {
		name  string
		e     store.Embedder
		s     store.EmbedScope
		batch int
		msg   string
	}{
		{"no model", fakeEmbedder{}, web, 1, "no embedder or no model"},
		{"no organization", e, store.EmbedScope{}, 1, "need an organization"},
		{"no batch", e, web, 0, "positive batch"},
		{"failing", fakeEmbedder{model: "m2", err: errors.New("boom")}, web, 1, "embed 1 texts: boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.db.IndexEmbedScope(ctx, tc.e, tc.s, tc.batch)
			if err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v, want %q", err, tc.msg)
			}
		})
	}
}

// TestIndexEmbedScopeReadsOnlyItsScope: the statements of IndexEmbedScope
// reach the scope's rows through indexes: for a small project next to a
// big one, no plan scans the items or the vectors of the organization.
func TestIndexEmbedScopeReadsOnlyItsScope(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newKBFix(t)
	mustExec(t, f.db, benchItemsSQL, f.api.ID, 3000)
	for n := 1; n <= 20; n++ {
		insertItem(t, f.db, f.web, n, "Item", "d")
	}
	e := fakeEmbedder{model: "m1"}
	for _, p := range []store.Project{f.api, f.web} {
		if _, err := f.db.IndexEmbedScope(ctx, e, store.EmbedScope{OrganizationID: f.org.ID, ProjectID: p.ID}, 5000); err != nil {
			t.Fatal(err)
		}
	}
	mustExec(t, f.db, `UPDATE items SET title = 'changed' WHERE key = 'WEB-1'`)
	var web1 string
	if err := f.db.Pool().QueryRow(ctx, `SELECT id::text FROM items WHERE key = 'WEB-1'`).Scan(&web1); err != nil {
		t.Fatal(err)
	}
	mustExec(t, f.db, `ANALYZE items`)
	mustExec(t, f.db, `ANALYZE search_embeddings`)
	for _, tc := range []struct {
		name, sql string
		args      []any
	}{
		{"stale, project", store.EmbedStaleSQL, []any{f.org.ID, f.web.ID, "m1", store.EmbedScanLimit}},
		{"stale, organization", store.EmbedStaleSQL, []any{f.org.ID, "", "m1", store.EmbedScanLimit}},
		{"texts, project", store.EmbedTextsSQL, []any{f.org.ID, f.web.ID, []string{"item", "skill"}, []string{web1, web1}}},
		{"texts, organization", store.EmbedTextsSQL, []any{f.org.ID, "", []string{"knowledge", "skill"}, []string{web1, web1}}},
		{"gone, project", store.EmbedGoneSQL, []any{f.org.ID, f.web.ID}},
		{"gone, organization", store.EmbedGoneSQL, []any{f.org.ID, ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows, err := f.db.Pool().Query(ctx, "EXPLAIN "+tc.sql, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			var plan []string
			for rows.Next() {
				var line string
				if err := rows.Scan(&line); err != nil {
					t.Fatal(err)
				}
				plan = append(plan, line)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			// The organization index would read every vector of the
			// organization, of all its projects.
			p := strings.Join(plan, "\n")
			for _, bad := range []string{"Seq Scan on items", "Seq Scan on search_embeddings", "search_embeddings_organization_idx"} {
				if strings.Contains(p, bad) {
					t.Fatalf("plan reads beyond the scope (%s):\n%s", bad, p)
				}
			}
		})
	}
}

func mustExec(t *testing.T, db *store.DB, sql string, args ...any) {
	t.Helper()
	if _, err := db.Pool().Exec(context.Background(), sql, args...); err != nil {
		t.Fatal(err)
	}
}
