package store

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
)

// TestNumberingGateShares: callers arriving while a numbering runs share
// one numbering that starts after it; each caller's numbering started after
// the caller arrived; a caller whose context ends returns at once and the
// others still get theirs; an error reaches the callers that shared it.
func TestNumberingGateShares(t *testing.T) {
	t.Parallel()
	joins := make(chan struct{}, 100)
	g := numberingGate{joined: func() { joins <- struct{}{} }}
	var runs atomic.Int64
	release := make(chan struct{})
	started := make(chan int64, 10)
	var fail atomic.Bool
	fn := func(context.Context) error {
		n := runs.Add(1)
		started <- n
		if n == 1 {
			<-release
		}
		if fail.Load() {
			return errors.New("numbering failed")
		}
		return nil
	}
	ctx := context.Background()
	first := make(chan error, 1)
	go func() { first <- g.do(ctx, fn) }()
	if n := <-started; n != 1 {
		t.Fatalf("first run %d", n)
	}
	// 50 callers arrive while the first run is held.
	const callers = 50
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- g.do(ctx, fn)
		}()
	}
	for range callers {
		<-joins
	}
	// One more, whose context ends before its numbering can start.
	cctx, cancel := context.WithCancel(ctx)
	cancelled := make(chan error, 1)
	go func() { cancelled <- g.do(cctx, fn) }()
	<-joins
	cancel()
	if err := <-cancelled; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller = %v, want context.Canceled", err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("%d numberings for %d callers, want 2: the held one and one shared by all who came during it", n, callers+2)
	}
	// Idle again: the next caller runs at once, and sees its run's error.
	fail.Store(true)
	if err := g.do(ctx, fn); err == nil || err.Error() != "numbering failed" {
		t.Fatalf("failing numbering = %v", err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.running || g.next != nil {
		t.Fatalf("gate not idle after its runs: running %v, next %v", g.running, g.next)
	}
}
