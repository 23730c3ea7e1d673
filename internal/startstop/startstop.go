// Package startstop is the one lifecycle of the process's background
// services, after River's internal/startstop: a Service starts with
// Start(ctx) and stops with Stop, which is safe before Start and safe
// twice; Base holds the run of one service (its context, its goroutines,
// the once logic), and Group starts services in order, stops them in
// reverse and unwinds a failed start.
package startstop

import (
	"context"
	"sync"
)

// Service is a background part of a process.
//
// Start returns once the service runs (or with why it cannot): what it runs
// in the background lives until Stop, not until ctx ends; ctx bounds the
// start only. Stop ends the service and returns once it has: it is bounded
// (a drain timeout is the service's configuration), safe before Start and
// safe twice.
type Service interface {
	Start(ctx context.Context) error
	Stop()
}

// Base is the run of one service: the context its goroutines run under,
// cancelled by Stop, and the goroutines Stop waits for. A service embeds it
// and calls StartInit at the top of its Start; one with nothing more to
// release than its goroutines uses Base's Stop as its own, and one that
// holds more calls StopRun first and releases the rest when it reports a
// run. The zero value is ready to use.
type Base struct {
	mu     sync.Mutex
	ctx    context.Context
	cancel context.CancelFunc
	wg     *sync.WaitGroup
}

// StartInit begins a start: it returns the context of the run, which keeps
// ctx's values but not its cancellation (Stop cancels it), and false when
// the service runs already, and then Start has nothing to do. A start that
// fails after StartInit calls StartFailed.
func (b *Base) StartInit(ctx context.Context) (context.Context, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cancel != nil {
		return nil, false
	}
	b.ctx, b.cancel = context.WithCancel(context.WithoutCancel(ctx))
	b.wg = &sync.WaitGroup{}
	return b.ctx, true
}

// Go runs fn in the background with the run's context, until the context
// ends; StopRun waits for it. It does nothing outside a run.
func (b *Base) Go(fn func(ctx context.Context)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cancel == nil {
		return
	}
	ctx, wg := b.ctx, b.wg
	wg.Add(1)
	go func() {
		defer wg.Done()
		fn(ctx)
	}()
}

// StartFailed ends a run whose start failed after StartInit: what Go
// started is stopped and waited for, Stop does nothing, and the service
// may be started again.
func (b *Base) StartFailed() { b.StopRun() }

// StopRun cancels the run's context and waits for the goroutines of Go. It
// reports whether there was a run, true once per successful StartInit: a
// service's Stop releases what its Start took only then.
func (b *Base) StopRun() bool {
	b.mu.Lock()
	cancel, wg := b.cancel, b.wg
	b.ctx, b.cancel, b.wg = nil, nil, nil
	b.mu.Unlock()
	if cancel == nil {
		return false
	}
	cancel()
	wg.Wait()
	return true
}

// Stop ends the run and waits for its goroutines; safe before Start and
// safe twice.
func (b *Base) Stop() { b.StopRun() }
