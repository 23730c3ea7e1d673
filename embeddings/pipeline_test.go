package embeddings_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/balletplanner/ballet/embeddings"
	"github.com/balletplanner/ballet/gateway/fakellm"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
	"github.com/balletplanner/ballet/tasks"
	"github.com/balletplanner/ballet/tasks/taskstest"
)

// testEmbedder embeds with the fake model's vectors, counting its calls;
// the first fails calls fail, and while block is set each call waits for
// it to close.
type testEmbedder struct {
	model string
	fails atomic.Int64
	block chan struct{}

	mu    sync.Mutex
	calls [][]string // texts of each call that answered
	tried atomic.Int64
}

func (e *testEmbedder) Model() string { return e.model }

func (e *testEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	e.tried.Add(1)
	if e.block != nil {
		select {
		case <-e.block:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if e.fails.Add(-1) >= 0 {
		return nil, errors.New("embeddings provider: 503 overloaded")
	}
	e.mu.Lock()
	e.calls = append(e.calls, slices.Clone(texts))
	e.mu.Unlock()
	out := make([][]float32, len(texts))
	for i, t := range texts {
		out[i] = fakellm.Embed(t)
	}
	return out, nil
}

// callsWith counts the answered calls that embedded a text containing s.
func (e *testEmbedder) callsWith(s string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, c := range e.calls {
		if slices.ContainsFunc(c, func(t string) bool { return strings.Contains(t, s) }) {
			n++
		}
	}
	return n
}

// pipeline is an embeddings pipeline on a database and Redis namespace of
// the test's own, with a project of organization acme and its engineer.
type pipeline struct {
	t     *testing.T
	db    *store.DB
	human store.Caller
	deps  embeddings.Deps
}

// newPipeline is a pipeline that embeds with emb.
func newPipeline(t *testing.T, emb *testEmbedder, sc embeddings.SearchConfig) *pipeline {
	t.Helper()
	fx := storetest.NewProject(t)
	db := fx.DB
	rdb, rc := taskstest.New(t)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return &pipeline{t: t, db: db, human: fx.Human, deps: embeddings.Deps{DB: db, Redis: rdb,
		Queue: tasks.NewQueue(rdb, tasks.Names{Namespace: rc.Namespace}, time.Minute), Search: sc, Log: log,
		Embedders: func(string, string) store.Embedder { return emb }}}
}

// start runs the pipeline until the test ends.
func (e *pipeline) start() *embeddings.Service {
	e.t.Helper()
	d := e.deps
	d.Registry = prometheus.NewRegistry()
	s, err := embeddings.New(d)
	must(e.t, err)
	must(e.t, s.Start(context.Background()))
	e.t.Cleanup(s.Stop)
	return s
}

func searchConfig(model string) embeddings.SearchConfig {
	sc := embeddings.DefaultSearchConfig()
	sc.EmbeddingsModel = model
	sc.EmbedDelay = 300 * time.Millisecond
	return sc
}

func (e *pipeline) knowledge(title, body string) store.KnowledgeEntry {
	e.t.Helper()
	k, err := e.db.CreateKnowledge(context.Background(), e.human, "acme", store.NewKnowledge{
		Kind: store.KnowledgeNote, Title: title, Body: body, Projects: []string{"WEB"}})
	must(e.t, err)
	return k
}

// semanticHits searches the knowledge space with q through the vector leg
// of model and returns the titles found.
func (e *pipeline) semanticHits(emb store.Embedder, q string) []string {
	e.t.Helper()
	hits, err := e.db.SearchKnowledge(context.Background(), e.human, "acme", store.KnowledgeSearch{Q: q,
		Embedders: func(string, string) store.Embedder { return emb }})
	must(e.t, err)
	var titles []string
	for _, h := range hits {
		titles = append(titles, h.Title)
	}
	return titles
}

// waitEmbedded waits until the scopes are clean and no vector is of
// another model than model.
func (e *pipeline) waitEmbedded(model string, want int64) {
	e.t.Helper()
	var cur, other int64
	var dirty []store.EmbedScope
	if !storetest.Poll(storetest.WaitTimeout, func() bool {
		var err error
		cur, other, err = e.db.EmbeddingCounts(context.Background(), model)
		must(e.t, err)
		dirty, err = e.db.DirtyEmbedScopes(context.Background(), 10)
		must(e.t, err)
		return cur == want && other == 0 && len(dirty) == 0
	}) {
		e.t.Fatalf("vectors: %d of %s (want %d), %d of others; dirty %v", cur, model, want, other, dirty)
	}
}

// TestEmbedQueueEmbedsAnEditedEntry: an entry created and then edited is
// embedded by the embeddings pipeline, and a query that shares no word
// with it but a concept finds it through the vector leg.
func TestEmbedQueueEmbedsAnEditedEntry(t *testing.T) {
	t.Parallel()
	emb := &testEmbedder{model: "embed-a"}
	e := newPipeline(t, emb, searchConfig("embed-a"))
	k := e.knowledge("Checkout incident", "Payments were down for an hour.")
	e.start()
	e.waitEmbedded("embed-a", 1)
	title := "Checkout outage report"
	_, err := e.db.UpdateKnowledge(context.Background(), e.human, "acme", k.ID, store.KnowledgeUpdate{Version: k.Version, Title: &title})
	must(t, err)
	storetest.WaitFor(t, "the edited title to be embedded", func() bool { return emb.callsWith("outage report") == 1 })
	e.waitEmbedded("embed-a", 1)
	if got := e.semanticHits(emb, "downtime"); !slices.Contains(got, title) {
		t.Fatalf("search downtime: %v, want %q", got, title)
	}
}

// TestEmbedQueueCoalescesABurst: edits of one entry within the embed delay
// are one embed task, one embeddings call.
func TestEmbedQueueCoalescesABurst(t *testing.T) {
	t.Parallel()
	emb := &testEmbedder{model: "embed-a"}
	sc := searchConfig("embed-a")
	sc.EmbedDelay = 3 * time.Second
	e := newPipeline(t, emb, sc)
	k := e.knowledge("Release notes", "v1")
	e.start()
	e.waitEmbedded("embed-a", 1)
	ctx := context.Background()
	start := time.Now()
	const edits = 20
	for i := range edits {
		body := "burst edit " + strings.Repeat("x", i+1)
		k2, err := e.db.UpdateKnowledge(ctx, e.human, "acme", k.ID, store.KnowledgeUpdate{Version: k.Version, Body: &body})
		must(t, err)
		k = k2
	}
	took := time.Since(start)
	final := "burst edit " + strings.Repeat("x", edits)
	storetest.WaitFor(t, "the last edit to be embedded", func() bool { return emb.callsWith(final) > 0 })
	e.waitEmbedded("embed-a", 1)
	got := emb.callsWith("burst edit")
	// The whole burst within the window is one task; a machine too loaded
	// to make 20 edits in 3s gets a task per window it spanned.
	if want := 1 + int(took/sc.EmbedDelay); got > want {
		t.Fatalf("%d edits in %s were embedded by %d calls, want at most %d", edits, took, got, want)
	}
}

// TestEmbedQueueRetriesAFailingProvider: a provider that fails three times
// is retried with backoff, and the entry is embedded after.
func TestEmbedQueueRetriesAFailingProvider(t *testing.T) {
	t.Parallel()
	emb := &testEmbedder{model: "embed-a"}
	e := newPipeline(t, emb, searchConfig("embed-a"))
	e.knowledge("Login", "SSO is broken for some customers.")
	emb.fails.Store(3)
	e.start()
	e.waitEmbedded("embed-a", 1)
	if n := emb.tried.Load(); n < 4 {
		t.Fatalf("%d embeddings calls, want the 3 failures and a success", n)
	}
}

// TestEmbedQueueMarksAgainAfterTheLastRetry: a task that fails on its
// last retry marks its scope again, and the dispatcher's next task
// embeds it: nothing is lost.
func TestEmbedQueueMarksAgainAfterTheLastRetry(t *testing.T) {
	t.Parallel()
	emb := &testEmbedder{model: "embed-a"}
	sc := searchConfig("embed-a")
	sc.EmbedMaxRetry = 1
	e := newPipeline(t, emb, sc)
	e.knowledge("Invoice", "Refund flow.")
	emb.fails.Store(2) // the first run and its one retry
	e.start()
	e.waitEmbedded("embed-a", 1)
	if n := emb.tried.Load(); n < 3 {
		t.Fatalf("%d embeddings calls, want 2 failures and a success", n)
	}
}

// TestEmbedQueueReembedsOnAModelChange: a pipeline started with another
// model re-embeds every vector in the background, and search then uses
// the new model's vectors only.
func TestEmbedQueueReembedsOnAModelChange(t *testing.T) {
	t.Parallel()
	a := &testEmbedder{model: "embed-a"}
	e := newPipeline(t, a, searchConfig("embed-a"))
	for _, title := range []string{"Deploy checklist", "Latency budget", "Password rotation"} {
		e.knowledge(title, "notes")
	}
	w := e.start()
	e.waitEmbedded("embed-a", 3)
	w.Stop()

	b := &testEmbedder{model: "embed-b"}
	e.deps.Search = searchConfig("embed-b")
	e.deps.Embedders = func(string, string) store.Embedder { return b }
	e.start()
	e.waitEmbedded("embed-b", 3)
	if got := e.semanticHits(a, "rollout"); slices.Contains(got, "Deploy checklist") {
		t.Fatalf("a query embedded with the old model still finds the old vectors: %v", got)
	}
	if got := e.semanticHits(b, "rollout"); !slices.Contains(got, "Deploy checklist") {
		t.Fatalf("search rollout with the new model: %v", got)
	}
}

// TestEmbedDispatcherSurvivesALostListener: with the dispatcher's LISTEN
// connection killed, an edit is still embedded (the listener reconnects,
// and the backstop sweep reads the marks whatever the notifications).
func TestEmbedDispatcherSurvivesALostListener(t *testing.T) {
	t.Parallel()
	emb := &testEmbedder{model: "embed-a"}
	e := newPipeline(t, emb, searchConfig("embed-a"))
	k := e.knowledge("Rollout plan", "v1")
	e.start()
	e.waitEmbedded("embed-a", 1)
	ctx := context.Background()
	var killed int
	storetest.WaitFor(t, "the dispatcher's LISTEN connection killed", func() bool {
		err := e.db.Pool().QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE application_name = $1 AND datname = current_database()`, embeddings.ListenerName).Scan(&killed)
		must(t, err)
		return killed > 0
	})
	body := "after the listener was lost"
	_, err := e.db.UpdateKnowledge(ctx, e.human, "acme", k.ID, store.KnowledgeUpdate{Version: k.Version, Body: &body})
	must(t, err)
	storetest.WaitFor(t, "the edit embedded", func() bool { return emb.callsWith(body) == 1 })
	e.waitEmbedded("embed-a", 1)
	storetest.WaitFor(t, "the dispatcher listening again", func() bool {
		var n int
		must(t, e.db.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = $1 AND datname = current_database()`, embeddings.ListenerName).Scan(&n))
		return n == 1
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestPipelineOffWithoutAModelOrEmbedders: without search.embeddings_model
// or without embedders, the pipeline does nothing: Start enqueues no
// backfill and embeds nothing, and Stop is safe.
func TestPipelineOffWithoutAModelOrEmbedders(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		edit func(*embeddings.Deps)
	}{
		{"no model", func(d *embeddings.Deps) { d.Search.EmbeddingsModel = "" }},
		{"no embedders", func(d *embeddings.Deps) { d.Embedders = nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			emb := &testEmbedder{model: "embed-a"}
			e := newPipeline(t, emb, searchConfig("embed-a"))
			e.knowledge("Checkout incident", "Payments were down for an hour.")
			tt.edit(&e.deps)
			s := e.start()
			if s.Enabled() {
				t.Fatal("Enabled: true, want the pipeline off")
			}
			_, err := e.deps.Queue.Inspector().GetTaskInfo(e.deps.Queue.Names().EmbedQueue(), embeddings.BackfillTaskID("embed-a"))
			if !errors.Is(err, asynq.ErrQueueNotFound) && !errors.Is(err, asynq.ErrTaskNotFound) {
				t.Fatalf("backfill task of an off pipeline: %v, want none", err)
			}
			s.Stop()
			if n := emb.tried.Load(); n != 0 {
				t.Fatalf("%d embeddings calls by an off pipeline", n)
			}
		})
	}
}
