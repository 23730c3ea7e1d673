package main

import (
	"context"
	"flag"
	"slices"
	"testing"
	"time"

	"github.com/balletplanner/ballet/store"
)

var lostEnqueues = flag.Int("lost-enqueues", 3,
	"measure commit → started over this many sends whose enqueue was lost, at default settings (docs/benchmarks.md uses 30)")

// defaultWorkers runs two worker processes at the default worker settings,
// over newStack's shorter test ones, first come first served: a send
// enqueues its turn after its commit, and a lost enqueue is the api dying
// in between. (Through the dispatcher, the same loss is the dispatcher
// dying between its mark and its enqueue; the same sweep finds both.)
func defaultWorkers(s *stack) []*process {
	s.env = append(s.env, "BALLET_WORKER_LEASE=15s", "BALLET_WORKER_TASK_CHECK_INTERVAL=5ms",
		"BALLET_WORKER_SHUTDOWN_TIMEOUT=10s", "BALLET_SCHEDULER_MODE=fifo")
	s.db.SetDirectDispatch(true)
	return []*process{s.worker(), s.worker()}
}

// lostSend stores a human message and its turn as the api does, and then
// does not enqueue it: the api died between its commit and the enqueue.
func (s *stack) lostSend(session, text string) store.SendResult {
	s.t.Helper()
	res, err := s.db.SendMessage(context.Background(), s.human, session, text, "", store.QueueLimits{})
	must(s.t, err)
	return res
}

// turnRow is what Postgres holds of a turn once it ended.
type turnRow struct {
	status   string
	attempts int
	waited   time.Duration // commit → claim, on the database's clock
}

func (s *stack) turnRow(turn string) turnRow {
	s.t.Helper()
	var r turnRow
	var ms float64
	must(s.t, s.db.Pool().QueryRow(context.Background(), `SELECT status, attempts,
		COALESCE(EXTRACT(EPOCH FROM started_at - created_at) * 1000, -1) FROM planner_turns WHERE id = $1`,
		turn).Scan(&r.status, &r.attempts, &ms))
	r.waited = time.Duration(ms * float64(time.Millisecond))
	return r
}

// notQueued sums ballet_planner_resumes_total{reason="not_queued"} over
// the workers.
func notQueued(t *testing.T, workers []*process) float64 {
	t.Helper()
	var n float64
	for _, p := range workers {
		n += p.metric(t, `ballet_planner_resumes_total{reason="not_queued"}`)
	}
	return n
}

// A turn committed but never enqueued (the api died in between) is found
// by a worker's sweeper, enqueued by exactly one of the workers, and runs and
// ends exactly once; the turns queued behind it in its session follow it in
// order through the usual path.
func TestLostEnqueueRunsOnceThroughTheSweeper(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		sessions int
		behind   int // turns sent behind the lost one in each session
	}{
		{name: "one lost send", sessions: 1},
		{name: "lost sends in several sessions", sessions: 12},
		{name: "a backlog behind a lost send", sessions: 1, behind: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStack(t, "loop: true\nanswers:\n  - content:\n      - text: ok\n")
			workers := defaultWorkers(s)
			ctx := context.Background()
			type sent struct{ session, turn string }
			var turns []sent
			for range tc.sessions {
				sess, err := s.db.CreateSession(ctx, s.human, "WEB", "lost")
				must(t, err)
				for i := range 1 + tc.behind {
					res := s.lostSend(sess.ID, "hello")
					if head := i == 0; res.Head != head {
						t.Fatalf("send %d: head %v, want %v", i, res.Head, head)
					}
					turns = append(turns, sent{sess.ID, res.Turn})
				}
			}
			last := map[string]time.Time{} // per session: the start of the turn ahead
			for _, tr := range turns {
				s.session = tr.session
				outs := s.waitDone(tr.turn)
				if got := countTypes(outs, store.OutputStarted); got != 1 || countTypes(outs, store.OutputDone) != 1 ||
					outs[len(outs)-1].Text != "end_turn" {
					t.Fatalf("turn %s: outputs %v; want one started and one done end_turn", tr.turn, outs)
				}
				r := s.turnRow(tr.turn)
				if r.status != string(store.TurnDone) || r.attempts != 1 {
					t.Fatalf("turn %s: status %s after %d attempts; want done after 1", tr.turn, r.status, r.attempts)
				}
				var started time.Time
				must(t, s.db.Pool().QueryRow(ctx, `SELECT started_at FROM planner_turns WHERE id = $1`, tr.turn).Scan(&started))
				if started.Before(last[tr.session]) {
					t.Fatalf("turn %s started before the turn ahead of it", tr.turn)
				}
				last[tr.session] = started
			}
			if got, want := notQueued(t, workers), float64(tc.sessions); got != want {
				t.Fatalf("not_queued resumes over both workers: %v, want %v (one per lost enqueue)", got, want)
			}
		})
	}
}

// TestLostEnqueueRecoveryTime measures how long a turn whose enqueue was
// lost waits: from the send's commit to the turn's start (both on the
// database's clock), at the default settings with two workers. The suite
// runs a few; the measurement runs more:
//
//	go test ./cmd/ballet -run TestLostEnqueueRecoveryTime -v -args -lost-enqueues=30
func TestLostEnqueueRecoveryTime(t *testing.T) {
	t.Parallel()
	s := newStack(t, "loop: true\nanswers:\n  - content:\n      - text: ok\n")
	workers := defaultWorkers(s)
	ctx := context.Background()
	var took []time.Duration
	for range *lostEnqueues {
		sess, err := s.db.CreateSession(ctx, s.human, "WEB", "lost")
		must(t, err)
		s.session = sess.ID
		turn := s.lostSend(sess.ID, "hello").Turn
		s.waitDone(turn)
		r := s.turnRow(turn)
		if r.attempts != 1 {
			t.Fatalf("turn %s: %d attempts, want 1", turn, r.attempts)
		}
		took = append(took, r.waited)
	}
	if got := notQueued(t, workers); got != float64(*lostEnqueues) {
		t.Fatalf("not_queued resumes over both workers: %v, want %d", got, *lostEnqueues)
	}
	slices.Sort(took)
	q := func(p float64) time.Duration { return took[min(len(took)-1, int(p*float64(len(took))))] }
	t.Logf("commit → started over %d lost enqueues: min %s  p50 %s  p90 %s  p99 %s  max %s", len(took),
		took[0].Round(time.Millisecond), q(0.50).Round(time.Millisecond), q(0.90).Round(time.Millisecond),
		q(0.99).Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond))
}
