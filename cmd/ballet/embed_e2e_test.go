package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
	"github.com/balletplanner/ballet/tasks/taskstest"
)

// embedStack is `ballet serve` with the demo loaded, on a database and a
// Redis namespace the test keeps across restarts, with the test's own
// handle on the database.
type embedStack struct {
	t     *testing.T
	dbURL string
	ns    string
	db    *store.DB
	p     *process
	c     client
}

func newEmbedStack(t *testing.T) *embedStack {
	t.Helper()
	s := &embedStack{t: t, dbURL: storetest.URL(t), ns: taskstest.Config(t).Namespace}
	db, err := store.Open(context.Background(), store.Config{URL: s.dbURL, MaxConns: 4})
	must(t, err)
	t.Cleanup(db.Close)
	s.db = db
	return s
}

// start starts `ballet serve` with the fake model (script: demo or a file)
// and extra settings.
func (s *embedStack) start(script string, extra ...string) {
	s.t.Helper()
	env := append([]string{"BALLET_DATABASE_URL=" + s.dbURL, "BALLET_REDIS_NAMESPACE=" + s.ns}, extra...)
	p, token, _ := startDemoServe(s.t, script, env...)
	s.p = p
	s.c = client{t: s.t, base: "http://" + p.addr + "/api/v1", token: token}
}

type kbEntry struct {
	ID      string
	Version int
	Title   string
}

func (s *embedStack) create(title, body string) kbEntry {
	s.t.Helper()
	var k kbEntry
	if st := s.c.do("POST", "/organizations/demo/knowledge/entries", map[string]any{"kind": "note", "title": title,
		"body": body, "projects": []string{"DEMO"}}, &k); st != 201 {
		s.t.Fatalf("create kbEntry: %d", st)
	}
	return k
}

func (s *embedStack) retitle(k kbEntry, title string) kbEntry {
	s.t.Helper()
	var out kbEntry
	if st := s.c.do("PATCH", "/organizations/demo/knowledge/entries/"+k.ID, map[string]any{"version": k.Version, "title": title}, &out); st != 200 {
		s.t.Fatalf("edit kbEntry: %d", st)
	}
	return out
}

// search returns the titles GET /organizations/demo/knowledge/search finds.
func (s *embedStack) search(q string) []string {
	s.t.Helper()
	var res struct{ Items []struct{ Title string } }
	if st := s.c.do("GET", "/organizations/demo/knowledge/search?q="+url.QueryEscape(q), nil, &res); st != 200 {
		s.t.Fatalf("search %q: %d", q, st)
	}
	var titles []string
	for _, h := range res.Items {
		titles = append(titles, h.Title)
	}
	return titles
}

// waitEmbedded waits until no scope is dirty and every vector is of model.
func (s *embedStack) waitEmbedded(model string) int64 {
	s.t.Helper()
	var cur, other int64
	var dirty []store.EmbedScope
	if !storetest.Poll(storetest.WaitTimeout, func() bool {
		// Idle first, then the counts: a task that ends in between would
		// leave counts read before it stale.
		var err error
		dirty, err = s.db.DirtyEmbedScopes(context.Background(), 10)
		must(s.t, err)
		if len(dirty) > 0 || !s.embedQueueIdle() {
			return false
		}
		cur, other, err = s.db.EmbeddingCounts(context.Background(), model)
		must(s.t, err)
		return cur > 0 && other == 0
	}) {
		s.t.Fatalf("vectors %d of %s, %d of others, dirty %v\n%s", cur, model, other, dirty, s.p.log())
	}
	return cur
}

// embedQueueIdle reports that the embed queue holds no task that can
// still run: a scope's mark is taken when its task starts, so no mark is
// not yet done.
func (s *embedStack) embedQueueIdle() bool {
	s.t.Helper()
	opt, err := asynq.ParseRedisURI(taskstest.URL())
	must(s.t, err)
	insp := asynq.NewInspector(opt)
	defer insp.Close()
	info, err := insp.GetQueueInfo(s.ns + "embed")
	if errors.Is(err, asynq.ErrQueueNotFound) {
		return true
	}
	must(s.t, err)
	return info.Pending+info.Active+info.Scheduled+info.Retry == 0
}

// vectorsByType counts the stored vectors by model and entity type.
func (s *embedStack) vectorsByType() map[string]int {
	s.t.Helper()
	rows, err := s.db.Pool().Query(context.Background(), `SELECT model || ' ' || entity_type, count(*) FROM search_embeddings GROUP BY 1`)
	must(s.t, err)
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		must(s.t, rows.Scan(&k, &n))
		out[k] = n
	}
	return out
}

// usage counts the usage rows of model by caller, scope (org or the
// project's key) and status.
func (s *embedStack) usage(model string) map[string]int {
	s.t.Helper()
	rows, err := s.db.Pool().Query(context.Background(), `
		SELECT u.caller, o.key, COALESCE(p.key, ''), u.status, count(*) FROM usage u
		JOIN organizations o ON o.id = u.organization_id LEFT JOIN projects p ON p.id = u.project_id
		WHERE u.model = $1 GROUP BY 1, 2, 3, 4`, model)
	must(s.t, err)
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var caller, org, project string
		var status, n int
		must(s.t, rows.Scan(&caller, &org, &project, &status, &n))
		out[fmt.Sprintf("%s %s/%s %d", caller, org, project, status)] = n
	}
	must(s.t, rows.Err())
	return out
}

// waitUsage waits until the usage rows of key (see usage) number at least
// n, and returns their number.
func (s *embedStack) waitUsage(model, key string, n int) int {
	s.t.Helper()
	var u map[string]int
	if !storetest.Poll(storetest.WaitTimeout, func() bool { u = s.usage(model); return u[key] >= n }) {
		s.t.Fatalf("usage rows %q: want %d, have %v", key, n, u)
	}
	return u[key]
}

// TestServeFindsAnEditedEntryByMeaning: with search.embeddings_model set,
// an edited knowledge kbEntry is embedded by the embed queue and found over
// REST by a query that shares no word with it but a concept ("downtime"
// for an "outage"); a burst of edits is one embed task; the embeddings are
// metered to the organization (knowledge) and the project (its items).
// Without the model, the same query finds nothing: no vector leg.
func TestServeFindsAnEditedEntryByMeaning(t *testing.T) {
	t.Parallel()
	const model = "fake-embed"
	s := newEmbedStack(t)
	s.start("demo", "BALLET_SEARCH_EMBEDDINGS_MODEL="+model, "BALLET_SEARCH_EMBED_DELAY=3s")
	k := s.create("Checkout report", "Payments failed for an hour.")
	s.waitEmbedded(model)
	// Usage rows are written in batches: wait for the organization's.
	before := s.waitUsage(model, "search:index demo/ 200", 1)

	start := time.Now()
	const edits = 10
	for i := range edits {
		k = s.retitle(k, fmt.Sprintf("Checkout outage report %d", i))
	}
	took := time.Since(start)
	final := k.Title
	storetest.WaitFor(t, "the edited kbEntry found by meaning", func() bool { return slices.Contains(s.search("downtime"), final) })
	s.waitEmbedded(model)
	calls := s.waitUsage(model, "search:index demo/ 200", before+1) - before
	if want := 1 + int(took/(3*time.Second)); calls < 1 || calls > want {
		t.Fatalf("%d edits in %s: %d embeddings calls for the organization, want 1 to %d", edits, took, calls, want)
	}

	for _, key := range []string{"search:index demo/DEMO 200", "search:query demo/ 200"} {
		s.waitUsage(model, key, 1)
	}
	var byModel struct{ Items []struct{ Key string } }
	s.c.do("GET", "/projects/DEMO/usage?group_by=model", nil, &byModel)
	if !slices.ContainsFunc(byModel.Items, func(i struct{ Key string }) bool { return i.Key == model }) {
		t.Errorf("project usage by model lacks %s: %+v", model, byModel.Items)
	}
	s.p.stop(t)
}

// TestServeWithoutModelHasNoVectorLeg: without search.embeddings_model the
// kbEntry is found by its words only, and nothing is embedded.
func TestServeWithoutModelHasNoVectorLeg(t *testing.T) {
	t.Parallel()
	s := newEmbedStack(t)
	s.start("demo")
	k := s.create("Checkout report", "Payments failed for an hour.")
	k = s.retitle(k, "Checkout outage report")
	if got := s.search("outage"); !slices.Contains(got, k.Title) {
		t.Fatalf("search outage: %v", got)
	}
	if got := s.search("downtime"); slices.Contains(got, k.Title) {
		t.Fatalf("search downtime found %v without a vector leg", got)
	}
	if cur, other, err := s.db.EmbeddingCounts(context.Background(), ""); err != nil || cur+other != 0 {
		t.Fatalf("vectors stored without a model: %d, %d, %v", cur, other, err)
	}
	s.p.stop(t)
}

// TestServeEmbedsAfterProviderFailuresAndReembedsOnModelChange: the fake's
// first embeddings calls fail; the embed queue retries with backoff and the
// kbEntry is embedded after. A restart with another model re-embeds every
// vector in the background; search then finds by the new vectors.
func TestServeEmbedsAfterProviderFailuresAndReembedsOnModelChange(t *testing.T) {
	t.Parallel()
	script := writeFile(t, "loop: true\nanswers:\n  - content:\n      - text: ok\nembeddings:\n  fail_first: 3\n  status: 503\n")
	s := newEmbedStack(t)
	s.start(script, "BALLET_SEARCH_EMBEDDINGS_MODEL=embed-a", "BALLET_SEARCH_EMBED_DELAY=100ms",
		"BALLET_GATEWAY_RETRY_MAX_ATTEMPTS=1") // the failures reach the embed queue
	k := s.create("Checkout outage report", "Payments failed for an hour.")
	n := s.waitEmbedded("embed-a")
	storetest.WaitFor(t, "the kbEntry found by meaning", func() bool { return slices.Contains(s.search("downtime"), k.Title) })
	if !strings.Contains(s.p.log(), "embedding failed; retrying with backoff") {
		t.Fatalf("no embed task failed:\n%s", s.p.log())
	}
	s.p.stop(t)

	s.start("demo", "BALLET_SEARCH_EMBEDDINGS_MODEL=embed-b", "BALLET_SEARCH_EMBED_DELAY=100ms")
	if got := s.waitEmbedded("embed-b"); got != n {
		t.Fatalf("%d vectors of embed-b after the change, want the %d of embed-a: %v", got, n, s.vectorsByType())
	}
	if got := s.search("downtime"); !slices.Contains(got, k.Title) {
		t.Fatalf("search downtime with embed-b: %v", got)
	}
	// `ballet search backfill` marks every scope through the backfill task
	// and, with --wait, reports once the embed queue is done.
	env := []string{"BALLET_DATABASE_URL=" + s.dbURL, "BALLET_REDIS_URL=" + taskstest.URL(), "BALLET_REDIS_NAMESPACE=" + s.ns,
		"BALLET_SEARCH_EMBEDDINGS_MODEL=embed-b"}
	out, stderr, code := ballet(t, env, "search", "backfill", "--wait", "--timeout", "60s")
	want := fmt.Sprintf("vectors: %d of embed-b, 0 of other models", n)
	if code != 0 || !strings.Contains(out, "task backfill:embed-b") || !strings.Contains(out, "search backfill: done\n"+want) {
		t.Fatalf("search backfill: exit %d\n%s%s", code, out, stderr)
	}
	out, stderr, code = ballet(t, env, "search", "status")
	if code != 0 || !strings.Contains(out, want) || !strings.Contains(out, "scopes waiting to be embedded: 0") ||
		!strings.Contains(out, "queue "+s.ns+"embed: 0 pending") {
		t.Fatalf("search status: exit %d\n%s%s", code, out, stderr)
	}
	s.p.stop(t)
}

// TestSearchCommandNeedsAModel: without search.embeddings_model there is no
// vector leg and nothing to backfill; the message says so.
func TestSearchCommandNeedsAModel(t *testing.T) {
	t.Parallel()
	for _, sub := range []string{"backfill", "status"} {
		_, stderr, code := ballet(t, []string{"BALLET_DATABASE_URL=" + storetest.URL(t)}, "search", sub)
		if code != 1 || !strings.Contains(stderr, "search.embeddings_model is empty: search is full-text and trigram only (no vector leg)") {
			t.Fatalf("search %s: exit %d, stderr %q", sub, code, stderr)
		}
	}
	_, stderr, code := ballet(t, nil, "search", "reindex")
	if code != 2 || !strings.Contains(stderr, `unknown command "reindex" for "ballet search"`) {
		t.Fatalf("search reindex: exit %d, stderr %q", code, stderr)
	}
}
