package main

import (
	"context"
	"flag"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
)

var recoveryKills = flag.Int("recovery-kills", 2,
	"measure kill → resumed over this many SIGKILLs of a worker process at default settings (docs/benchmarks.md uses 30)")

// TestRecoveryTime measures how long a SIGKILLed worker's turn waits before
// another worker resumes it: from the kill to the survivor's claim of the
// session's lease (a new fencing token). The suite runs two kills and checks
// that each turn resumed and ended; the measurement runs more:
//
//	go test ./cmd/ballet -run TestRecoveryTime -v -args -recovery-kills=30
func TestRecoveryTime(t *testing.T) {
	script, release := resumeScript(t)
	s := newStack(t, script)
	// The defaults, over newStack's shorter test settings.
	s.env = append(s.env, "BALLET_WORKER_LEASE=15s", "BALLET_WORKER_TASK_CHECK_INTERVAL=5ms",
		"BALLET_WORKER_SHUTDOWN_TIMEOUT=10s")
	workers := []*process{s.worker(), s.worker()}
	ctx := context.Background()
	var took []time.Duration
	for range *recoveryKills {
		sess, err := s.db.CreateSession(ctx, s.human, "WEB", "recovery")
		must(t, err)
		s.session = sess.ID
		turn := s.send("what can start now?")
		storetest.WaitFor(t, "the turn's second model call", func() bool {
			for _, o := range s.outputs() {
				if o.Turn == turn && o.Type == store.OutputToolResult {
					return s.fake.Active() > 0
				}
			}
			return false
		})
		token := s.leaseToken()
		holder := s.leaseHolder()
		victim := slices.IndexFunc(workers, func(p *process) bool { return p.cmd.Process.Pid == holder })
		if victim < 0 {
			t.Fatalf("lease held by pid %d, not one of ours", holder)
		}
		must(t, workers[victim].cmd.Process.Signal(syscall.SIGKILL))
		killed := time.Now()
		must(t, os.WriteFile(release, nil, 0o600))
		storetest.WaitFor(t, "another worker to claim the session after the kill",
			func() bool { return s.leaseToken() != token })
		took = append(took, time.Since(killed))
		s.waitDone(turn)
		must(t, os.Remove(release)) // the next turn holds again
		workers[victim] = s.worker()
	}
	slices.Sort(took)
	q := func(p float64) time.Duration { return took[min(len(took)-1, int(p*float64(len(took))))] }
	t.Logf("kill → resumed over %d SIGKILLs: min %s  p50 %s  p90 %s  p99 %s  max %s", len(took),
		took[0].Round(time.Millisecond), q(0.50).Round(time.Millisecond), q(0.90).Round(time.Millisecond),
		q(0.99).Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond))
}

// leaseToken is the session's current fencing token.
func (s *stack) leaseToken() int64 {
	s.t.Helper()
	var token int64
	must(s.t, s.db.Pool().QueryRow(context.Background(), `SELECT lease_token FROM planner_sessions WHERE id = $1`,
		s.session).Scan(&token))
	return token
}
