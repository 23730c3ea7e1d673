package ttlcache

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// clock is a settable time source.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) add(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.t = c.t.Add(d) }

func TestCache(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	type step struct {
		set     string        // key to set, with value set+"!" until t0+ttl
		ttl     time.Duration // of set
		del     string        // key to delete
		advance time.Duration
	}
	tests := []struct {
		name  string
		max   int
		steps []step
		want  map[string]bool // key: whether Get finds it
	}{
		{"fresh entry is found", 4, []step{{set: "a", ttl: time.Minute}}, map[string]bool{"a": true, "b": false}},
		{"entry expires at its own time", 4, []step{{set: "a", ttl: time.Minute}, {set: "b", ttl: time.Hour}, {advance: time.Minute}},
			map[string]bool{"a": false, "b": true}},
		{"past expiry keeps nothing", 4, []step{{set: "a", ttl: 0}}, map[string]bool{"a": false}},
		{"delete drops", 4, []step{{set: "a", ttl: time.Minute}, {del: "a"}}, map[string]bool{"a": false}},
		{"full drops the expired first", 2, []step{{set: "a", ttl: time.Second}, {set: "b", ttl: time.Hour}, {advance: time.Second}, {set: "c", ttl: time.Hour}},
			map[string]bool{"a": false, "b": true, "c": true}},
		{"full of live entries starts over", 2, []step{{set: "a", ttl: time.Hour}, {set: "b", ttl: time.Hour}, {set: "c", ttl: time.Hour}},
			map[string]bool{"a": false, "b": false, "c": true}},
		{"replacing a key when full keeps the others", 2, []step{{set: "a", ttl: time.Hour}, {set: "b", ttl: time.Hour}, {set: "a", ttl: time.Hour}},
			map[string]bool{"a": true, "b": true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clk := &clock{t: t0}
			c := New[string](tt.max, clk.now)
			for _, s := range tt.steps {
				if s.set != "" {
					c.Set(s.set, s.set+"!", clk.now().Add(s.ttl))
				}
				if s.del != "" {
					c.Delete(s.del)
				}
				clk.add(s.advance)
			}
			for k, want := range tt.want {
				v, ok := c.Get(k)
				if ok != want || (ok && v != k+"!") {
					t.Errorf("Get(%q) = %q, %v; want found %v", k, v, ok, want)
				}
			}
		})
	}
}

func TestLoad(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	tests := []struct {
		name      string
		err       error
		wantLoads int64 // after two Loads in a row
	}{
		{"a loaded value is kept", nil, 1},
		{"a failed load is not kept", boom, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := New[int](8, nil)
			var loads atomic.Int64
			load := func(context.Context) (int, time.Time, error) {
				return int(loads.Add(1)), time.Now().Add(time.Hour), tt.err
			}
			for range 2 {
				v, err := c.Load(context.Background(), "k", load)
				if !errors.Is(err, tt.err) || (err == nil && v != 1) {
					t.Fatalf("Load = %d, %v; want 1, %v", v, err, tt.err)
				}
			}
			if n := loads.Load(); n != tt.wantLoads {
				t.Errorf("loads = %d, want %d", n, tt.wantLoads)
			}
		})
	}
}

func TestLoadSharesConcurrentMisses(t *testing.T) {
	t.Parallel()
	c := New[int](8, nil)
	release, started := make(chan struct{}), make(chan struct{})
	var loads atomic.Int64
	load := func(context.Context) (int, time.Time, error) {
		if loads.Add(1) == 1 {
			close(started)
		}
		<-release
		return 7, time.Now().Add(time.Hour), nil
	}
	const callers = 8
	errs := make(chan error, callers)
	for range callers {
		go func() {
			v, err := c.Load(context.Background(), "k", load)
			if err == nil && v != 7 {
				err = errors.New("wrong value")
			}
			errs <- err
		}()
	}
	// The load cannot end before release: every caller that misses in the
	// meantime joins it, and those that come after it read the cache.
	<-started
	close(release)
	for range callers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := loads.Load(); n != 1 {
		t.Errorf("loads = %d, want 1", n)
	}
}

func TestLoadCallerLeavesLoadGoesOn(t *testing.T) {
	t.Parallel()
	c := New[int](8, nil)
	release, started := make(chan struct{}), make(chan struct{})
	loadCtxErr := make(chan error, 1)
	load := func(ctx context.Context) (int, time.Time, error) {
		close(started)
		<-release
		loadCtxErr <- ctx.Err()
		return 3, time.Now().Add(time.Hour), nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := c.Load(ctx, "k", load); done <- err }()
	<-started
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Load after its ctx ended = %v, want context.Canceled", err)
	}
	close(release)
	// A second lookup joins the load still running or reads what it kept.
	v, err := c.Load(context.Background(), "k", func(context.Context) (int, time.Time, error) {
		return 0, time.Time{}, errors.New("a second load ran")
	})
	if err != nil || v != 3 {
		t.Fatalf("Load = %d, %v; want 3 from the first load", v, err)
	}
	if err := <-loadCtxErr; err != nil {
		t.Errorf("the load's ctx ended with its caller's: %v", err)
	}
}
