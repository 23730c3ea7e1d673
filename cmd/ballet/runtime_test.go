package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"testing"
)

// step is a service that records its Start and Stop, and fails Start
// with err (or with the context's error once it is done, like a first
// Postgres write cut short by SIGTERM).
type step struct {
	name     string
	err      error
	ctxBound bool
	log      *[]string
}

func (s *step) Start(ctx context.Context) error {
	*s.log = append(*s.log, "start "+s.name)
	if s.ctxBound && ctx.Err() != nil {
		return ctx.Err()
	}
	return s.err
}

func (s *step) Stop() { *s.log = append(*s.log, "stop "+s.name) }

// A signal while the services start is a shutdown: what started is
// stopped and the process exits cleanly; a start that fails on its own
// is an error.
func TestRunStopsCleanlyOnASignalWhileStarting(t *testing.T) {
	t.Parallel()
	broken := errors.New("redis: connection refused")
	tests := []struct {
		name     string
		signaled bool
		second   step
		wantErr  error
		want     []string
	}{
		{"signal while the second starts", true, step{name: "worker", ctxBound: true}, nil,
			[]string{"start metrics", "start worker", "stop metrics"}},
		{"a start that fails without a signal", false, step{name: "worker", err: broken}, broken,
			[]string{"start metrics", "start worker", "stop metrics"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var log []string
			first := &step{name: "metrics", log: &log}
			second := tt.second
			second.log = &log
			ctx, cancel := context.WithCancel(context.Background())
			if tt.signaled {
				cancel()
			} else {
				defer cancel()
			}
			rt := &runtime{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
			err := rt.run(ctx, first, &second)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("run: %v, want %v", err, tt.wantErr)
			}
			if !slices.Equal(log, tt.want) {
				t.Fatalf("calls %q, want %q", log, tt.want)
			}
		})
	}
}
