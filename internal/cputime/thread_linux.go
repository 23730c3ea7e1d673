package cputime

import (
	"time"

	"golang.org/x/sys/unix"
)

// Thread is the CPU time of the calling OS thread so far
// (CLOCK_THREAD_CPUTIME_ID), 0 if the system refuses to say. It is a
// goroutine's own CPU time only while the goroutine is locked to its
// thread (runtime.LockOSThread).
func Thread() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
