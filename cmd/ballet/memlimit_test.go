package main

import (
	"bytes"
	"errors"
	"log/slog"
	"math"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// TestSetMemoryLimit: a process in a container with a memory limit sets
// the Go runtime's soft limit to 90 % of it and says so; GOMEMLIMIT or
// AUTOMEMLIMIT=off leave the runtime's own setting; no cgroup, or a cgroup
// without a limit, sets none. The runtime's limit is process-wide, so the
// cases run one after the other and the limit is put back.
func TestSetMemoryLimit(t *testing.T) {
	const mib = 1 << 20
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	tests := []struct {
		name     string
		env      map[string]string
		provider memlimit.Provider
		want     int64 // the runtime's limit after; 0 is unchanged
		log      string
	}{
		{"90% of the cgroup's limit", nil, memlimit.Limit(1000 * mib), 900 * mib, "memory limit"},
		{"GOMEMLIMIT wins", map[string]string{"GOMEMLIMIT": "300MiB"}, memlimit.Limit(1000 * mib), 0, "memory limit"},
		{"AUTOMEMLIMIT=off", map[string]string{"AUTOMEMLIMIT": "off"}, memlimit.Limit(1000 * mib), 0, "memory limit"},
		{"a cgroup without a limit", nil, func() (uint64, error) { return 0, memlimit.ErrNoLimit }, math.MaxInt64, "memory limit: none (the cgroup sets none)"},
		{"not in a cgroup", nil, func() (uint64, error) { return 0, memlimit.ErrNoCgroup }, 0, "memory limit: none (not in a cgroup)"},
		{"the cgroup cannot be read", nil, func() (uint64, error) { return 0, errors.New("permission denied") }, 0, "memory limit: could not read the cgroup's; none set"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("GOMEMLIMIT", "")
			t.Setenv("AUTOMEMLIMIT", "")
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			if tt.env["AUTOMEMLIMIT"] == "" {
				t.Setenv("AUTOMEMLIMIT", "0.9")
			}
			const start = 123 * mib
			debug.SetMemoryLimit(start)
			var buf bytes.Buffer
			log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
			setMemoryLimit(log, tt.provider)
			want := tt.want
			if want == 0 {
				want = start
			}
			if got := debug.SetMemoryLimit(-1); got != want {
				t.Errorf("runtime memory limit %d, want %d", got, want)
			}
			if !strings.Contains(buf.String(), `msg="`+tt.log) {
				t.Errorf("log %q, want %q", buf.String(), tt.log)
			}
		})
	}
}
