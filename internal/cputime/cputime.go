// Package cputime reads the CPU time this process has used, the measure
// behind the benchmarks' CPU per operation.
package cputime

import (
	"syscall"
	"time"
)

// Process is this process's user and system CPU time so far (getrusage),
// 0 if the system refuses to say.
func Process() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
