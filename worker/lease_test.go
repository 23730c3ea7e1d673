package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/balletplanner/ballet/internal/logtest"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
	"github.com/balletplanner/ballet/worker"
)

// shortLease is the shortest lease worker.lease allows; it is renewed every
// third of it.
func shortLease(c *worker.Config, _ *worker.PlannerConfig) { c.Lease = time.Second }

func (e *env) leaseExpiresAt(session string) time.Time {
	e.t.Helper()
	var at time.Time
	must(e.t, e.db.Pool().QueryRow(context.Background(),
		`SELECT lease_expires_at FROM planner_sessions WHERE id = $1`, session).Scan(&at))
	return at
}

// waitStarted waits for the turn's started output.
func (e *env) waitStarted(session, turn string) {
	e.t.Helper()
	storetest.WaitFor(e.t, "turn "+turn+"'s started output", func() bool {
		for _, o := range e.outputs(session, turn) {
			if o.Type == store.OutputStarted {
				return true
			}
		}
		return false
	})
}

// A turn whose model call outlasts the lease keeps its lease: it is renewed
// while the call waits, and the turn ends in its first attempt. The model's
// answer holds before its first delta until the lease has been renewed a
// full lease past its first expiry, that is until the call has outlasted it.
func TestLeaseIsRenewedWhileTheModelIsSlow(t *testing.T) {
	t.Parallel()
	release := filepath.Join(t.TempDir(), "release")
	e := newEnv(t, fmt.Sprintf("answers:\n  - hold_until: %q\n    content:\n      - text: slow but sure\n", release))
	e.start(shortLease)
	s := e.session()
	turn := e.send(s, "take your time").Turn
	e.waitStarted(s, turn)
	first := e.leaseExpiresAt(s)
	storetest.WaitFor(t, "the lease renewed a full lease past its first expiry", func() bool {
		return e.leaseExpiresAt(s).After(first.Add(time.Second))
	})
	must(t, os.WriteFile(release, nil, 0o600))
	e.wantAnsweredInOneAttempt(s, turn, "the lease ran out under the turn")
}

// A turn whose lease another worker took over stops at its next renewal,
// in the middle of its model call, and writes nothing more: the new holder
// ends it.
func TestTurnStopsWhenItsLeaseIsTakenOver(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "answers:\n  - latency: 30s\n    content:\n      - text: too late\n")
	var log logtest.Buffer
	e.deps.Log = slog.New(slog.NewTextHandler(&log, nil))
	e.start(shortLease)
	ctx := context.Background()
	s := e.session()
	turn := e.send(s, "hello").Turn
	e.waitStarted(s, turn)
	// Another worker takes the session over once the lease has run out (a
	// renewal between the two statements extends it again: then retry).
	must(t, e.db.Beat(ctx, "other-worker", time.Hour))
	storetest.WaitFor(t, "another worker to take the turn over", func() bool {
		_, err := e.db.Pool().Exec(ctx, `UPDATE planner_sessions SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, s)
		must(t, err)
		c, err := e.db.ClaimTurn(ctx, turn, "other-worker", time.Hour)
		must(t, err)
		return c.State == store.ClaimRun
	})
	taken := time.Now()
	storetest.WaitFor(t, "the first worker to give the turn up", func() bool {
		return strings.Contains(log.String(), "lease lost; another worker took the turn over")
	})
	if waited := time.Since(taken); waited > 20*time.Second {
		t.Fatalf("the turn stopped %s after the takeover: it waited for the model instead of its renewal", waited)
	}
	for _, o := range e.outputs(s, turn) {
		if o.Type != store.OutputQueued && o.Type != store.OutputStarted {
			t.Fatalf("the first worker wrote %s after losing the lease; outputs %v", o.Type, types(e.outputs(s, turn)))
		}
	}
	if n := e.attempts(turn); n != 2 {
		t.Fatalf("%d attempts, want 2 (the first worker's and the takeover)", n)
	}
}
