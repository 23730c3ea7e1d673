package cputime_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/balletplanner/ballet/internal/cputime"
)

// Work done shows up as more CPU time.
func TestProcessCountsWork(t *testing.T) {
	t.Parallel()
	start := cputime.Process()
	if start <= 0 {
		t.Fatalf("CPU time so far %s, want more than 0", start)
	}
	x := uint64(1)
	for deadline := time.Now().Add(10 * time.Second); cputime.Process() == start; {
		if time.Now().After(deadline) {
			t.Fatalf("CPU time stayed at %s through 10 s of work (%d)", start, x)
		}
		for range 1 << 16 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
}

// Work on a locked thread shows up in its CPU time.
func TestThreadCountsItsOwnWork(t *testing.T) {
	t.Parallel()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := cputime.Thread()
	x := uint64(1)
	for deadline := time.Now().Add(10 * time.Second); cputime.Thread()-start < 5*time.Millisecond; {
		if time.Now().After(deadline) {
			t.Fatalf("thread CPU time grew by %s through 10 s of work (%d)", cputime.Thread()-start, x)
		}
		for range 1 << 16 {
			x = x*6364136223846793005 + 1
		}
	}
}
