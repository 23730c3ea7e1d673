package main

import (
	"context"
	"flag"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
)

var (
	recoveryKills = flag.Int("recovery-kills", 2,
		"measure kill → resumed over this many SIGKILLs of a worker process at default settings (docs/benchmarks.md uses 30)")
	recoveryPauses = flag.Int("recovery-pauses", 1,
		"measure stop → resumed over this many SIGSTOPs of a worker process holding the session's row lock (docs/benchmarks.md uses 30)")
	recoveryPause = flag.Duration("recovery-pause", 6*time.Second, "how long each SIGSTOP lasts")
)

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
	var took []time.Duration
	for range *recoveryKills {
		turn, token, victim := s.turnInSecondModelCall(workers)
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
	logTakeovers(t, "kill → resumed", "SIGKILLs", took)
}

// TestRecoveryTimeAfterPauses measures the takeover of a turn whose worker
// is paused (SIGSTOP) while a transaction holding the session's row lock
// waits for it, as when a worker stops inside a tool's write: from the stop
// to the survivor's claim. The lock is taken, at the stop, in a pool opened
// with the workers' own configuration, standing in for the paused worker's
// own transaction: Postgres sees the same lock held by the same idle
// transaction. The worker is
// continued after the pause; the turn must end once, by the survivor.
//
//	go test ./cmd/ballet -run TestRecoveryTimeAfterPauses -v -args -recovery-pauses=30 -recovery-pause=10s
func TestRecoveryTimeAfterPauses(t *testing.T) {
	script, release := resumeScript(t)
	s := newStack(t, script)
	s.env = append(s.env, "BALLET_WORKER_LEASE=15s", "BALLET_WORKER_TASK_CHECK_INTERVAL=5ms",
		"BALLET_WORKER_SHUTDOWN_TIMEOUT=10s")
	workers := []*process{s.worker(), s.worker()}
	ctx := context.Background()
	var took []time.Duration
	for range *recoveryPauses {
		turn, token, victim := s.turnInSecondModelCall(workers)
		lock := s.lockSessionIdle()
		must(t, workers[victim].cmd.Process.Signal(syscall.SIGSTOP))
		stopped := time.Now()
		must(t, os.WriteFile(release, nil, 0o600))
		storetest.WaitFor(t, "another worker to claim the session after the stop",
			func() bool { return s.leaseToken() != token })
		took = append(took, time.Since(stopped))
		_ = lock.Rollback(ctx)
		time.Sleep(time.Until(stopped.Add(*recoveryPause))) // the pause itself, not a synchronisation
		must(t, workers[victim].cmd.Process.Signal(syscall.SIGCONT))
		s.waitDone(turn)
		must(t, os.Remove(release))
	}
	logTakeovers(t, "stop → resumed", "SIGSTOPs holding the session's lock", took)
}

// lockSessionIdle locks the session's row in a transaction left idle, in
// a pool opened from the workers' own configuration (s.env and the
// defaults): the paused worker's transaction, as Postgres sees it.
func (s *stack) lockSessionIdle() pgx.Tx {
	s.t.Helper()
	ctx := context.Background()
	cfg, err := LoadConfig("", s.env)
	must(s.t, err)
	db, err := store.Open(ctx, cfg.Database)
	must(s.t, err)
	s.t.Cleanup(db.Close)
	tx, err := db.Pool().Begin(ctx)
	must(s.t, err)
	_, err = tx.Exec(ctx, `SELECT 1 FROM planner_sessions WHERE id = $1 FOR UPDATE`, s.session)
	must(s.t, err)
	return tx
}

// turnInSecondModelCall sends a turn on a fresh session and waits until its
// second model call streams; it returns the turn, the session's fencing
// token and which of workers holds the lease.
func (s *stack) turnInSecondModelCall(workers []*process) (turn string, token int64, victim int) {
	s.t.Helper()
	sess, err := s.db.CreateSession(context.Background(), s.human, "WEB", "recovery")
	must(s.t, err)
	s.session = sess.ID
	turn = s.send("what can start now?")
	storetest.WaitFor(s.t, "the turn's second model call", func() bool {
		for _, o := range s.outputs() {
			if o.Turn == turn && o.Type == store.OutputToolResult {
				return s.fake.Active() > 0
			}
		}
		return false
	})
	token, holder := s.leaseToken(), s.leaseHolder()
	victim = slices.IndexFunc(workers, func(p *process) bool { return p.cmd.Process.Pid == holder })
	if victim < 0 {
		s.t.Fatalf("lease held by pid %d, not one of ours", holder)
	}
	return turn, token, victim
}

// logTakeovers logs the spread of the takeover times.
func logTakeovers(t *testing.T, what, of string, took []time.Duration) {
	slices.Sort(took)
	q := func(p float64) time.Duration { return took[min(len(took)-1, int(p*float64(len(took))))] }
	t.Logf("%s over %d %s: min %s  p50 %s  p90 %s  p99 %s  max %s", what, len(took), of,
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
