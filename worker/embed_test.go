package worker_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/balletplanner/ballet/embeddings"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
	"github.com/balletplanner/ballet/worker"
)

// hungEmbedder is a provider that does not answer: each call waits until
// release is closed (then fails) or its context ends, counting the calls.
type hungEmbedder struct {
	release chan struct{}
	tried   atomic.Int64
}

func (e *hungEmbedder) Model() string { return "embed-a" }

func (e *hungEmbedder) Embed(ctx context.Context, _ []string) ([][]float32, error) {
	e.tried.Add(1)
	select {
	case <-e.release:
		return nil, errors.New("embeddings provider: 503 overloaded")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// startEmbeddings runs the embeddings pipeline beside the env's workers,
// with emb, until the test ends.
func (e *env) startEmbeddings(emb store.Embedder) {
	e.t.Helper()
	sc := embeddings.DefaultSearchConfig()
	sc.EmbeddingsModel = emb.Model()
	s, err := embeddings.New(embeddings.Deps{DB: e.db, Redis: e.deps.Redis, Queue: e.queue, Search: sc, Log: e.log,
		Embedders: func(string, string) store.Embedder { return emb }, Registry: prometheus.NewRegistry()})
	must(e.t, err)
	must(e.t, s.Start(context.Background()))
	e.t.Cleanup(s.Stop)
}

func (e *env) knowledge(title, body string) {
	e.t.Helper()
	_, err := e.db.CreateKnowledge(context.Background(), e.human, "acme", store.NewKnowledge{
		Kind: store.KnowledgeNote, Title: title, Body: body, Projects: []string{"WEB"}})
	must(e.t, err)
}

// TestEmbeddingNeverTakesATurnsSlot: with one turn slot and the embeddings
// pipeline stuck on a provider that does not answer, turns still run.
func TestEmbeddingNeverTakesATurnsSlot(t *testing.T) {
	t.Parallel()
	emb := &hungEmbedder{release: make(chan struct{})}
	defer close(emb.release)
	e := newEnv(t, "loop: true\nanswers:\n  - content:\n      - text: ok\n")
	for i := range 5 {
		e.knowledge("Entry "+strings.Repeat("i", i+1), "text")
	}
	e.start(func(c *worker.Config, _ *worker.PlannerConfig) { c.Concurrency = 1 })
	e.startEmbeddings(emb)
	storetest.WaitFor(t, "the embed queue to be busy", func() bool { return emb.tried.Load() > 0 })
	s := e.session()
	for range 3 {
		res := e.send(s, "hello")
		e.waitDone(s, res.Turn)
	}
}
