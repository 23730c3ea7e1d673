package store

import (
	"context"
	"sync"
	"time"
)

// numberingGate lets the readers of one process that must see every
// committed event numbered (numberQueuedEvents) share numberings instead of
// each taking the numbering lock with a connection of its own: a reconnect
// storm of stream subscribers would otherwise queue on that lock with every
// connection of the pool. A caller joins the numbering that starts next,
// after it arrived, so that numbering sees every event committed before the
// call; at most one numbering runs, and one waits, per process.
type numberingGate struct {
	mu      sync.Mutex
	running bool
	next    *numbering // joined by callers arriving while one runs
	// joined, when set (tests), is called under mu as a caller joins a
	// numbering that waits for the running one.
	joined func()
}

// numbering is one shared run.
type numbering struct {
	done chan struct{}
	err  error
}

// numberingTimeout bounds a shared run, which no single caller's context
// may cut short for the others.
const numberingTimeout = 10 * time.Second

// do runs fn in the next numbering and returns its error, or ctx's.
func (g *numberingGate) do(ctx context.Context, fn func(context.Context) error) error {
	g.mu.Lock()
	n := g.next
	if n == nil {
		n = &numbering{done: make(chan struct{})}
		g.next = n
	}
	start := !g.running
	if start {
		g.running, g.next = true, nil
	} else if g.joined != nil {
		g.joined()
	}
	g.mu.Unlock()
	if start {
		go g.run(context.WithoutCancel(ctx), n, fn)
	}
	select {
	case <-n.done:
		return n.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run runs n, then the numbering its callers' followers joined meanwhile,
// if any, in a goroutine of its own. The gate is idle (or running next)
// before n's callers return: a caller that returns and calls again never
// finds n still marked running.
func (g *numberingGate) run(ctx context.Context, n *numbering, fn func(context.Context) error) {
	rctx, cancel := context.WithTimeout(ctx, numberingTimeout)
	n.err = fn(rctx)
	cancel()
	g.mu.Lock()
	next := g.next
	g.next = nil
	g.running = next != nil
	g.mu.Unlock()
	close(n.done)
	if next != nil {
		go g.run(ctx, next, fn)
	}
}
