package gateway

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/balletplanner/ballet/store"
)

// countingSource counts its lookups and holds each until release is
// closed; every lookup is reported on events.
type countingSource struct {
	lookups atomic.Int64
	events  chan string
	release chan struct{}
	err     error
}

func newCountingSource(n int) *countingSource {
	return &countingSource{events: make(chan string, 4*n), release: make(chan struct{})}
}

func (s *countingSource) ResolveLLMScope(_ context.Context, organizationID, projectID string) (store.LLMScope, error) {
	s.lookups.Add(1)
	s.events <- "lookup"
	<-s.release
	if s.err != nil {
		return store.LLMScope{}, s.err
	}
	return store.LLMScope{OrganizationID: organizationID, ProjectID: projectID, ProjectKey: "P-" + projectID}, nil
}

// waitingCtx reports on events each time a caller starts waiting on it.
type waitingCtx struct {
	context.Context
	events chan<- string
}

func (c waitingCtx) Done() <-chan struct{} {
	c.events <- "wait"
	return c.Context.Done()
}

// missAll runs n concurrent gets of one scope and releases the source once
// every caller waits on a lookup or n lookups are running, whichever comes
// first; it returns what each caller got.
func missAll(t *testing.T, c *scopeCache, src *countingSource, n int) ([]*scope, []error) {
	t.Helper()
	got, errs := make([]*scope, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			got[i], errs[i] = c.get(waitingCtx{t.Context(), src.events}, "org", "proj")
		})
	}
	waits, lookups := 0, 0
	for waits < n && lookups < n {
		if <-src.events == "wait" {
			waits++
		} else {
			lookups++
		}
	}
	close(src.release)
	wg.Wait()
	return got, errs
}

// TestScopeCacheSharesOneLookup: concurrent misses of one scope do one
// lookup and get the same scope; a fresh entry then answers without one,
// and an expired one is looked up again.
func TestScopeCacheSharesOneLookup(t *testing.T) {
	t.Parallel()
	const n = 8
	src := newCountingSource(n)
	clock := time.Unix(1_700_000_000, 0)
	var mu sync.Mutex
	c := newScopeCache(src, nil, 10*time.Second, func() time.Time { mu.Lock(); defer mu.Unlock(); return clock })
	got, errs := missAll(t, c, src, n)
	if l := src.lookups.Load(); l != 1 {
		t.Fatalf("%d concurrent misses did %d lookups, want 1", n, l)
	}
	for i := range n {
		if errs[i] != nil || got[i] != got[0] || got[i].ProjectKey != "P-proj" {
			t.Fatalf("caller %d got %+v, %v; want the one shared scope", i, got[i], errs[i])
		}
	}
	if s, err := c.get(t.Context(), "org", "proj"); err != nil || s != got[0] || src.lookups.Load() != 1 {
		t.Fatalf("fresh entry: %+v, %v after %d lookups; want the cached scope and no lookup", s, err, src.lookups.Load())
	}
	mu.Lock()
	clock = clock.Add(10 * time.Second)
	mu.Unlock()
	if s, err := c.get(t.Context(), "org", "proj"); err != nil || s == got[0] || src.lookups.Load() != 2 {
		t.Fatalf("expired entry: %+v, %v after %d lookups; want a new lookup", s, err, src.lookups.Load())
	}
}

// TestScopeCacheSharesFailures: the callers of one failed lookup all get its
// error, and nothing is cached: the next get looks up again.
func TestScopeCacheSharesFailures(t *testing.T) {
	t.Parallel()
	const n = 4
	src := newCountingSource(n)
	src.err = errors.New("connection refused")
	c := newScopeCache(src, nil, 10*time.Second, nil)
	_, errs := missAll(t, c, src, n)
	if l := src.lookups.Load(); l != 1 {
		t.Fatalf("%d concurrent misses did %d lookups, want 1", n, l)
	}
	for i, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "gateway: resolve scope: connection refused") {
			t.Fatalf("caller %d: error %v", i, err)
		}
	}
	if n := c.cache.Len(); n != 0 {
		t.Fatalf("a failed lookup was cached: %d entries", n)
	}
	if _, err := c.get(t.Context(), "org", "proj"); err == nil || src.lookups.Load() != 2 {
		t.Fatalf("after a failure: error %v after %d lookups; want a second lookup", err, src.lookups.Load())
	}
}

// TestScopeCacheCallerLeaves: a caller whose context ends stops waiting
// with its context's error; the lookup goes on for the others.
func TestScopeCacheCallerLeaves(t *testing.T) {
	t.Parallel()
	src := newCountingSource(2)
	c := newScopeCache(src, nil, 10*time.Second, nil)
	ctx, cancel := context.WithCancel(t.Context())
	left := make(chan error, 1)
	go func() {
		_, err := c.get(ctx, "org", "proj")
		left <- err
	}()
	if ev := <-src.events; ev != "lookup" {
		t.Fatalf("event %q, want the lookup", ev)
	}
	cancel()
	if err := <-left; !errors.Is(err, context.Canceled) || !strings.HasPrefix(err.Error(), "gateway: resolve scope: ") {
		t.Fatalf("leaving caller: error %v, want its context's", err)
	}
	stayed := make(chan *scope, 1)
	go func() {
		s, err := c.get(t.Context(), "org", "proj")
		if err != nil {
			t.Error(err)
		}
		stayed <- s
	}()
	close(src.release)
	if s := <-stayed; s == nil || s.ProjectKey != "P-proj" || src.lookups.Load() != 1 {
		t.Fatalf("staying caller: %+v after %d lookups; want the scope of the one lookup", s, src.lookups.Load())
	}
}
