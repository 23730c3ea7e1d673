package storetest

import (
	"testing"
	"time"
)

// WaitTimeout is how long WaitFor polls before it fails the test. It is long
// because a loaded CI machine can be many times slower than a quiet one; a
// condition that holds returns as soon as it is seen.
const WaitTimeout = 60 * time.Second

// pollInterval is the pause between two looks at a condition.
const pollInterval = 10 * time.Millisecond

// WaitFor polls cond until it returns true and fails t, the test that called
// it, when WaitTimeout passes first. what names the condition in the failure.
// Call it from the goroutine that runs t.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	WaitForWithin(t, WaitTimeout, what, cond)
}

// WaitForWithin is WaitFor with its own timeout.
func WaitForWithin(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Poll(timeout, cond) {
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
}

// Poll calls cond until it returns true (true) or timeout passes (false),
// for callers that report the failure themselves, e.g. with the last value
// seen.
func Poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pollInterval)
	}
}
