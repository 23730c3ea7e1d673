package startstop

import (
	"context"
	"fmt"
	"sync"
)

// Group is services started in order and stopped in reverse; it is a
// Service itself, so a group may hold groups.
type Group struct {
	services []Service

	mu      sync.Mutex
	started []Service
}

// NewGroup is a group of services, to start in the order given; a nil
// service is left out.
func NewGroup(services ...Service) *Group {
	g := &Group{}
	for _, s := range services {
		if s != nil {
			g.services = append(g.services, s)
		}
	}
	return g
}

// Start starts each service in order. When one fails, those started are
// stopped in reverse and its error is returned, named after the service
// (see Name). A group that runs already is not started again.
func (g *Group) Start(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.started != nil {
		return nil
	}
	started := make([]Service, 0, len(g.services))
	for _, s := range g.services {
		if err := s.Start(ctx); err != nil {
			stopReverse(started)
			return fmt.Errorf("start %s: %w", Name(s), err)
		}
		started = append(started, s)
	}
	g.started = started
	return nil
}

// Stop stops the started services in reverse order; safe before Start and
// safe twice.
func (g *Group) Stop() {
	g.mu.Lock()
	started := g.started
	g.started = nil
	g.mu.Unlock()
	stopReverse(started)
}

func stopReverse(started []Service) {
	for i := len(started) - 1; i >= 0; i-- {
		started[i].Stop()
	}
}

// StartAll starts the services in order as one group: on a failure it
// stops those started, in reverse, and returns the error. The group's Stop
// stops them all in reverse.
func StartAll(ctx context.Context, services ...Service) (*Group, error) {
	g := NewGroup(services...)
	if err := g.Start(ctx); err != nil {
		return nil, err
	}
	return g, nil
}

// Name is what errors call s: its Name method's answer when it has one
// (Named gives one), its type otherwise.
func Name(s Service) string {
	if n, ok := s.(interface{ Name() string }); ok {
		return n.Name()
	}
	return fmt.Sprintf("%T", s)
}

// Named gives s a name for Group's errors.
func Named(name string, s Service) Service { return named{Service: s, name: name} }

type named struct {
	Service
	name string
}

func (n named) Name() string { return n.name }

// Func is a service made of a start and a stop function, for what has no
// type of its own (an asynq server and what its Stop waits for, say). Its
// Stop calls stop once after each successful start: before Start, after a
// failed one and the second time, it does nothing. Start or Stop may be
// nil.
type Func struct {
	// Label names it in Group's errors.
	Label string
	// Up starts it; Down stops it, and is bounded.
	Up   func(ctx context.Context) error
	Down func()

	mu      sync.Mutex
	running bool
}

// Name is Label.
func (f *Func) Name() string { return f.Label }

// Start calls Up, once until Stop.
func (f *Func) Start(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.running {
		return nil
	}
	if f.Up != nil {
		if err := f.Up(ctx); err != nil {
			return err
		}
	}
	f.running = true
	return nil
}

// Stop calls Down once after a successful Start.
func (f *Func) Stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.running {
		return
	}
	f.running = false
	if f.Down != nil {
		f.Down()
	}
}
