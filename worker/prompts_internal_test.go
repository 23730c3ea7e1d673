package worker

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
)

// countingStore is the real store, counting the reads of a prompt build;
// when gate is set, the project read waits for it.
type countingStore struct {
	*store.DB
	reads atomic.Int64
	gate  chan struct{}
}

func (c *countingStore) ProjectByKey(ctx context.Context, key string) (store.Project, error) {
	c.reads.Add(1)
	if c.gate != nil {
		<-c.gate
	}
	return c.DB.ProjectByKey(ctx, key)
}

func (c *countingStore) OrganizationByKey(ctx context.Context, key string) (store.Organization, error) {
	c.reads.Add(1)
	return c.DB.OrganizationByKey(ctx, key)
}

// promptSession is a session of a project of its own in a fresh database.
func promptSession(t *testing.T) (*store.DB, store.Session) {
	t.Helper()
	ctx := context.Background()
	db := storetest.New(t)
	org, err := db.CreateOrganization(ctx, "acme", "Acme", store.SystemActor())
	if err != nil {
		t.Fatal(err)
	}
	p, err := db.CreateProject(ctx, org.ID, "WEB", "Web", store.SystemActor())
	if err != nil {
		t.Fatal(err)
	}
	return db, store.Session{ID: "s1", Project: p.Key, ProjectID: p.ID, OrganizationID: org.ID}
}

func TestPromptCacheConcurrentLookupsLoadOnce(t *testing.T) {
	t.Parallel()
	db, s := promptSession(t)
	cs := &countingStore{DB: db, gate: make(chan struct{})}
	var c promptCache
	load := func(ctx context.Context) (prompt, error) {
		return buildPrompt(ctx, cs, PlannerConfig{}, s, "ann@example.com", slog.Default())
	}
	const lookups = 8
	got := make([]prompt, lookups)
	errs := make([]error, lookups)
	var wg sync.WaitGroup
	for i := range lookups {
		wg.Go(func() { got[i], errs[i] = c.get(context.Background(), "WEB\x00ann", load) })
	}
	// Every lookup waits on the one load, held at its project read.
	storetest.WaitFor(t, "all lookups waiting on the load", func() bool { return c.waiting.Load() == lookups })
	close(cs.gate)
	wg.Wait()
	for i := range lookups {
		if errs[i] != nil {
			t.Fatalf("lookup %d: %v", i, errs[i])
		}
		if got[i].project.Key != "WEB" || !strings.Contains(got[i].system, "Web") || !strings.Contains(got[i].system, "Acme") {
			t.Fatalf("lookup %d: project %q, system prompt %q; want WEB's, naming Web and Acme", i, got[i].project.Key, got[i].system)
		}
	}
	if n := cs.reads.Load(); n != 2 {
		t.Fatalf("%d store reads for %d concurrent lookups; want 2 (one project, one organization)", n, lookups)
	}
	// A later lookup within promptTTL reads nothing.
	if _, err := c.get(context.Background(), "WEB\x00ann", load); err != nil {
		t.Fatal(err)
	}
	if n := cs.reads.Load(); n != 2 {
		t.Fatalf("%d store reads after a cached lookup; want still 2", n)
	}
}

func TestPromptCacheFailedLoadIsNotCached(t *testing.T) {
	t.Parallel()
	db, s := promptSession(t)
	cs := &countingStore{DB: db}
	var c promptCache
	missing := s
	missing.Project = "NOPE"
	load := func(ctx context.Context) (prompt, error) {
		return buildPrompt(ctx, cs, PlannerConfig{}, missing, "ann@example.com", slog.Default())
	}
	for i := range 2 {
		_, err := c.get(context.Background(), "NOPE\x00ann", load)
		if !store.IsCode(err, store.CodeNotFound) {
			t.Fatalf("lookup %d: error %v; want not_found", i, err)
		}
	}
	if n := cs.reads.Load(); n != 2 {
		t.Fatalf("%d store reads for two failed lookups; want 2 (each loads again)", n)
	}
}

func TestPromptCacheLookupStopsWaitingWhenItsContextEnds(t *testing.T) {
	t.Parallel()
	db, s := promptSession(t)
	cs := &countingStore{DB: db, gate: make(chan struct{})}
	var c promptCache
	load := func(ctx context.Context) (prompt, error) {
		return buildPrompt(ctx, cs, PlannerConfig{}, s, "ann@example.com", slog.Default())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.get(ctx, "WEB\x00ann", load)
		done <- err
	}()
	storetest.WaitFor(t, "the lookup waiting on its load", func() bool { return c.waiting.Load() == 1 })
	cancel()
	if err := <-done; err != context.Canceled {
		t.Fatalf("cancelled lookup: error %v; want context.Canceled", err)
	}
	// The load goes on without it and is cached for the next lookup.
	close(cs.gate)
	p, err := c.get(context.Background(), "WEB\x00ann", load)
	if err != nil || p.project.Key != "WEB" {
		t.Fatalf("next lookup: %v, %v; want WEB's prompt", p.project.Key, err)
	}
	if n := cs.reads.Load(); n != 2 {
		t.Fatalf("%d store reads; want 2 (the one load)", n)
	}
}
