package main

import (
	"errors"
	"log/slog"
	"math"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// memoryLimitRatio is the share of the container's memory limit that the Go
// runtime's soft limit (GOMEMLIMIT) is set to: the rest is the binary, the
// kernel's socket buffers and room for a burst.
const memoryLimitRatio = 0.9

// setMemoryLimit sets the Go runtime's soft memory limit to 90 % of the
// memory limit of the process's cgroup (a container's limits.memory), so
// that the collector runs before the kernel's OOM killer would. Without
// it, the heap of a process may grow to twice its live data (GOGC=100)
// whatever the container allows: 20,000 idle /rpc sockets need about
// 330 MiB live but reach 560 MiB. GOMEMLIMIT, when set, wins;
// AUTOMEMLIMIT=off leaves the runtime's default (no limit). provider is
// where the limit is read (memlimit.FromCgroup outside tests).
func setMemoryLimit(log *slog.Logger, provider memlimit.Provider) int64 {
	limit, err := memlimit.Set(memlimit.WithProvider(provider), memlimit.WithRatio(memoryLimitRatio))
	switch {
	case err != nil && (errors.Is(err, memlimit.ErrNoCgroup) || errors.Is(err, memlimit.ErrCgroupsNotSupported)):
		log.Debug("memory limit: none (not in a cgroup)")
	case err != nil:
		log.Warn("memory limit: could not read the cgroup's; none set", slog.Any("error", err))
	case limit == math.MaxInt64:
		log.Info("memory limit: none (the cgroup sets none)")
	default:
		log.Info("memory limit", slog.Int64("bytes", limit))
	}
	return limit
}
