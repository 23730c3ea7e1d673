package store_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/balletplanner/ballet/store"
)

// hookEmbedder is fakeEmbedder calling before, if set, ahead of each
// Embed call with the call's number (from 1) and texts; call failOn fails.
type hookEmbedder struct {
	fakeEmbedder
	mu     sync.Mutex
	n      int
	before func(call int, texts []string)
	failOn int
}

func (e *hookEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	e.mu.Lock()
	e.n++
	call := e.n
	e.mu.Unlock()
	if e.before != nil {
		e.before(call, texts)
	}
	if call == e.failOn {
		return nil, errors.New("boom")
	}
	return e.fakeEmbedder.Embed(ctx, texts)
}

// zeroEmbedder answers zero vectors, which compare with nothing.
type zeroEmbedder struct{}

func (zeroEmbedder) Model() string { return "zero" }

func (zeroEmbedder) Embed(_ context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i := range out {
		out[i] = make([]float32, 8)
	}
	return out, nil
}

// fillCalls runs IndexEmbedScopeLimit until it returns 0 (at most 10
// calls) and returns what each call returned.
func fillCalls(t *testing.T, db *store.DB, e store.Embedder, s store.EmbedScope, batch, limit int) []int {
	t.Helper()
	var got []int
	for range 10 {
		n, err := store.IndexEmbedScopeLimit(context.Background(), db, e, s, batch, limit)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, n)
		if n == 0 {
			return got
		}
	}
	t.Fatalf("not up to date after 10 calls: %v", got)
	return nil
}

// freshVectors counts the scope's items whose vector of model was made
// from their current text.
func freshVectors(t *testing.T, f *kbFix, p store.Project, model string) int {
	t.Helper()
	return f.count(t, `SELECT count(*) FROM items i JOIN search_embeddings se ON se.entity_type = 'item' AND se.entity_id = i.id
		WHERE i.project_id = $1 AND se.model = $2
		  AND se.content_hash = sha256(convert_to(left(i.key || E'\n' || i.title || E'\n' || i.description, 8000), 'UTF8'))`,
		p.ID, model)
}

// TestIndexEmbedScopeFill: a scan takes at most its limit of stale
// entities, in (type, id) order, and embeds them in calls of at most
// batch texts; the next call takes the rest; a model change makes every
// vector stale again.
func TestIndexEmbedScopeFill(t *testing.T) {
	t.Parallel()
	f := newKBFix(t)
	for n := 1; n <= 5; n++ {
		insertItem(t, f.db, f.web, n, "Item", "d")
	}
	if _, err := f.db.CreateSkill(context.Background(), f.admin, store.NewSkill{Name: "triage", Scope: "project:WEB",
		Description: "Sort the backlog", Draft: "Read each item."}); err != nil {
		t.Fatal(err)
	}
	web := store.EmbedScope{OrganizationID: f.org.ID, ProjectID: f.web.ID}
	for _, tc := range []struct {
		name         string
		model        string
		batch, limit int
		returns      []int
		calls        []int
	}{
		{"limit below the scope", "m1", 2, 4, []int{4, 2, 0}, []int{2, 2, 2}},
		{"up to date", "m1", 2, 4, []int{0}, nil},
		{"model change, one scan", "m2", 4, 100, []int{6, 0}, []int{4, 2}},
		{"limit of one", "m1", 3, 1, []int{1, 1, 1, 1, 1, 1, 0}, []int{1, 1, 1, 1, 1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := &embedLog{}
			got := fillCalls(t, f.db, fakeEmbedder{model: tc.model, log: log}, web, tc.batch, tc.limit)
			if !slices.Equal(got, tc.returns) || !slices.Equal(log.calls, tc.calls) {
				t.Fatalf("calls returned %v, embedded in calls of %v; want %v in %v", got, log.calls, tc.returns, tc.calls)
			}
			if n := freshVectors(t, f, f.web, tc.model); n != 5 {
				t.Fatalf("%d items with a fresh %s vector, want 5", n, tc.model)
			}
		})
	}
	// The skill sorts after the items: with a limit of 5, the first scan
	// takes the items.
	mustExec(t, f.db, `UPDATE items SET title = title || '!' WHERE project_id = $1`, f.web.ID)
	mustExec(t, f.db, `UPDATE skills SET description = description || '!' WHERE name = 'triage'`)
	log := &embedLog{}
	if got := fillCalls(t, f.db, fakeEmbedder{model: "m1", log: log}, web, 10, 5); !slices.Equal(got, []int{5, 1, 0}) ||
		!strings.HasPrefix(log.texts[5], "triage\n") {
		t.Fatalf("calls returned %v, last text %q", got, log.texts[len(log.texts)-1])
	}
}

// TestIndexEmbedScopeChangeDuringFill: a text changed while the call that
// read it runs is embedded again, changed, by the next call.
func TestIndexEmbedScopeChangeDuringFill(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newKBFix(t)
	for n := 1; n <= 4; n++ {
		insertItem(t, f.db, f.web, n, "Item", "d")
	}
	var order []string // keys in id order, the order of the scan
	rows, err := f.db.Pool().Query(ctx, `SELECT key FROM items WHERE project_id = $1 ORDER BY id`, f.web.ID)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var key string
		if err := rows.Scan(&key); err != nil {
			t.Fatal(err)
		}
		order = append(order, key)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// Calls of two texts: during the first, change the first item and the
	// last.
	first, last := order[0], order[3]
	log := &embedLog{}
	e := &hookEmbedder{fakeEmbedder: fakeEmbedder{model: "m1", log: log}, before: func(call int, _ []string) {
		if call == 1 {
			mustExec(t, f.db, `UPDATE items SET title = 'Renamed ' || key WHERE key IN ($1, $2)`, first, last)
		}
	}}
	web := store.EmbedScope{OrganizationID: f.org.ID, ProjectID: f.web.ID}
	if got := fillCalls(t, f.db, e, web, 2, 100); !slices.Equal(got, []int{4, 2, 0}) || !slices.Equal(log.calls, []int{2, 2, 2}) {
		t.Fatalf("calls returned %v, embedded in calls of %v; want [4 2 0] in [2 2 2]", got, log.calls)
	}
	want := []string{first + "\nItem\nd", order[1] + "\nItem\nd", order[2] + "\nItem\nd", last + "\nItem\nd",
		first + "\nRenamed " + first + "\nd", last + "\nRenamed " + last + "\nd"}
	if !slices.Equal(log.texts, want) {
		t.Fatalf("embedded %q, want %q", log.texts, want)
	}
	if n := freshVectors(t, f, f.web, "m1"); n != 4 {
		t.Fatalf("%d fresh vectors, want 4", n)
	}
}

// TestIndexEmbedScopeFailure: when a call of the embedder fails, the
// vectors of the calls before it are stored and counted; the next call
// embeds the rest.
func TestIndexEmbedScopeFailure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newKBFix(t)
	for n := 1; n <= 5; n++ {
		insertItem(t, f.db, f.web, n, "Item", "d")
	}
	web := store.EmbedScope{OrganizationID: f.org.ID, ProjectID: f.web.ID}
	n, err := f.db.IndexEmbedScope(ctx, &hookEmbedder{fakeEmbedder: fakeEmbedder{model: "m1"}, failOn: 2}, web, 2)
	if n != 2 || err == nil || !strings.Contains(err.Error(), "store: index embeddings: embed 2 texts: boom") {
		t.Fatalf("failing call: %d, %v; want 2 and the embedder's error", n, err)
	}
	if n := freshVectors(t, f, f.web, "m1"); n != 2 {
		t.Fatalf("%d vectors stored, want 2", n)
	}
	if got := fillCalls(t, f.db, fakeEmbedder{model: "m1"}, web, 2, 100); !slices.Equal(got, []int{3, 0}) {
		t.Fatalf("then calls returned %v, want [3 0]", got)
	}
}

// TestIndexEmbedScopeZeroVectors: a zero vector is stored empty, so the
// scope is up to date after it, and the vector leg never ranks it.
func TestIndexEmbedScopeZeroVectors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newKBFix(t)
	insertItem(t, f.db, f.web, 1, "Item", "d")
	insertItem(t, f.db, f.web, 2, "Item", "d")
	web := store.EmbedScope{OrganizationID: f.org.ID, ProjectID: f.web.ID}
	if got := fillCalls(t, f.db, zeroEmbedder{}, web, 10, 100); !slices.Equal(got, []int{2, 0}) {
		t.Fatalf("calls returned %v, want [2 0]", got)
	}
	if n := f.count(t, `SELECT count(*) FROM search_embeddings WHERE model = 'zero' AND embedding = ''::bytea`); n != 2 {
		t.Fatalf("%d empty vectors, want 2", n)
	}
	ids, err := store.RankItems(ctx, f.db, func(string, string) store.Embedder { return zeroQuery{} }, f.org.ID, f.web.ID, "item")
	if err != nil || len(ids) != 0 {
		t.Fatalf("ranked %v, %v; want nothing", ids, err)
	}
}

// zeroQuery is of model "zero" and answers a query with a unit vector.
type zeroQuery struct{}

func (zeroQuery) Model() string { return "zero" }

func (zeroQuery) Embed(_ context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i := range out {
		out[i] = []float32{1, 0, 0, 0, 0, 0, 0, 0}
	}
	return out, nil
}
