package startstop_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/balletplanner/ballet/internal/startstop"
)

// ticker is a service with one goroutine, run by a Base; it counts its
// runs and the releases of its Stop.
type ticker struct {
	startstop.Base
	mu       sync.Mutex
	runs     int
	released int
}

func (tk *ticker) Start(ctx context.Context) error {
	if _, ok := tk.StartInit(ctx); !ok {
		return nil
	}
	tk.Go(func(ctx context.Context) {
		tk.mu.Lock()
		tk.runs++
		tk.mu.Unlock()
		<-ctx.Done()
	})
	return nil
}

func (tk *ticker) Stop() {
	if tk.StopRun() {
		tk.mu.Lock()
		tk.released++
		tk.mu.Unlock()
	}
}

func (tk *ticker) counts() (runs, released int) {
	tk.mu.Lock()
	defer tk.mu.Unlock()
	return tk.runs, tk.released
}

func TestBase(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		steps        string // s: Start, x: Stop
		wantRuns     int
		wantReleased int
	}{
		{"stop before start does nothing", "x", 0, 0},
		{"stop twice releases once", "sxx", 1, 1},
		{"start twice runs once", "ssx", 1, 1},
		{"start after stop runs again", "sxsx", 2, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tk := &ticker{}
			for _, step := range tt.steps {
				if step == 's' {
					if err := tk.Start(t.Context()); err != nil {
						t.Fatalf("Start: %v", err)
					}
				} else {
					tk.Stop() // returns only once the goroutine has
				}
			}
			runs, released := tk.counts()
			if runs != tt.wantRuns || released != tt.wantReleased {
				t.Fatalf("runs %d, released %d; want %d and %d", runs, released, tt.wantRuns, tt.wantReleased)
			}
		})
	}
}

func TestBaseRunOutlivesStartContext(t *testing.T) {
	t.Parallel()
	var b startstop.Base
	ctx, cancel := context.WithCancel(t.Context())
	run, ok := b.StartInit(ctx)
	if !ok {
		t.Fatal("StartInit refused a first start")
	}
	cancel()
	if run.Err() != nil {
		t.Fatalf("the run's context ended with the start's: %v", run.Err())
	}
	b.Stop()
	if run.Err() == nil {
		t.Fatal("Stop left the run's context alive")
	}
}

func TestBaseStartFailed(t *testing.T) {
	t.Parallel()
	var b startstop.Base
	run, _ := b.StartInit(t.Context())
	b.StartFailed()
	if run.Err() == nil {
		t.Fatal("StartFailed left the run's context alive")
	}
	if b.StopRun() {
		t.Fatal("StopRun after StartFailed reported a run")
	}
	if _, ok := b.StartInit(t.Context()); !ok {
		t.Fatal("StartInit refused a start after a failed one")
	}
	b.Stop()
}

// recorder logs the starts and stops of named services.
type recorder struct {
	mu  sync.Mutex
	log []string
}

func (r *recorder) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, s)
}

func (r *recorder) service(name string, fail error) *startstop.Func {
	return &startstop.Func{Label: name,
		Up: func(context.Context) error {
			if fail != nil {
				r.add("fail " + name)
				return fail
			}
			r.add("start " + name)
			return nil
		},
		Down: func() { r.add("stop " + name) }}
}

func TestGroup(t *testing.T) {
	t.Parallel()
	errBoom := errors.New("boom")
	tests := []struct {
		name    string
		fail    string // the service whose start fails
		stops   int    // Group.Stop calls after Start
		want    []string
		wantErr string
	}{
		{name: "starts in order, stops in reverse", stops: 1,
			want: []string{"start a", "start b", "start c", "stop c", "stop b", "stop a"}},
		{name: "stop twice stops once", stops: 2,
			want: []string{"start a", "start b", "start c", "stop c", "stop b", "stop a"}},
		{name: "a failed start unwinds in reverse", fail: "c", stops: 1,
			want:    []string{"start a", "start b", "fail c", "stop b", "stop a"},
			wantErr: "start c: boom"},
		{name: "a failed first start stops nothing", fail: "a",
			want: []string{"fail a"}, wantErr: "start a: boom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := &recorder{}
			var services []startstop.Service
			for _, name := range []string{"a", "b", "c"} {
				var fail error
				if name == tt.fail {
					fail = errBoom
				}
				services = append(services, r.service(name, fail))
			}
			g := startstop.NewGroup(services...)
			err := g.Start(t.Context())
			if tt.wantErr == "" && err != nil {
				t.Fatalf("Start: %v", err)
			}
			if tt.wantErr != "" && (err == nil || err.Error() != tt.wantErr || !errors.Is(err, errBoom)) {
				t.Fatalf("Start: %v; want %q wrapping the service's error", err, tt.wantErr)
			}
			for range tt.stops {
				g.Stop()
			}
			if !slices.Equal(r.log, tt.want) {
				t.Fatalf("log %q; want %q", r.log, tt.want)
			}
		})
	}
}

func TestGroupStopBeforeStart(t *testing.T) {
	t.Parallel()
	r := &recorder{}
	g := startstop.NewGroup(r.service("a", nil), nil)
	g.Stop()
	if err := g.Start(t.Context()); err != nil {
		t.Fatalf("Start after an early Stop: %v", err)
	}
	g.Stop()
	if want := []string{"start a", "stop a"}; !slices.Equal(r.log, want) {
		t.Fatalf("log %q; want %q", r.log, want)
	}
}

func TestStartAllNames(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		service startstop.Service
		want    string
	}{
		{"named", startstop.Named("heartbeat", &ticker{}), "heartbeat"},
		{"a Func by its label", &startstop.Func{Label: "asynq"}, "asynq"},
		{"unnamed by its type", &ticker{}, "*startstop_test.ticker"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := startstop.Name(tt.service); got != tt.want {
				t.Fatalf("Name %q; want %q", got, tt.want)
			}
		})
	}
	failing := &startstop.Func{Label: "listener", Up: func(context.Context) error { return errors.New("port taken") }}
	tk := &ticker{}
	g, err := startstop.StartAll(t.Context(), startstop.Named("ticker", tk), failing)
	if g != nil || err == nil || !strings.HasPrefix(err.Error(), "start listener: ") {
		t.Fatalf("StartAll: %v, %v; want the listener's error, named", g, err)
	}
	if runs, released := tk.counts(); runs != 1 || released != 1 {
		t.Fatalf("the started ticker: runs %d, released %d; want it unwound", runs, released)
	}
}
