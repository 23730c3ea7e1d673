package main

import (
	"os"
	"testing"
	"time"

	"github.com/balletplanner/ballet/internal/cputime"
)

// procRunTime of this process adds up to what getrusage says, to within a
// millisecond above it, and not to a single thread's share; a process that
// does not exist has none.
func TestProcRunTime(t *testing.T) {
	t.Parallel()
	x := uint64(1)
	for range 1 << 22 { // some CPU time of our own to compare
		x = x*6364136223846793005 + 1442695040888963407
	}
	before := cputime.Process()
	got := procRunTime(os.Getpid())
	after := cputime.Process()
	// Threads that exited took their share with them (this test binary's
	// live as long as it does); half is what only the leader might give.
	if got > after+time.Millisecond || got < before/2 {
		t.Errorf("procRunTime(self) = %s, getrusage %s before and %s after (%d)", got, before, after, x)
	}
	if got := procRunTime(1 << 30); got != 0 {
		t.Errorf("procRunTime of no process = %s, want 0", got)
	}
}
