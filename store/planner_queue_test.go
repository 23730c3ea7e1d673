package store_test

import (
	"context"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/balletplanner/ballet/store"
)

// assertQueueCounts checks the queue counters against a count of the
// queued turns: per project and shard, per project and in all.
func assertQueueCounts(t *testing.T, f *trackerFixture, step string) {
	t.Helper()
	ctx := context.Background()
	var wrong int
	if err := f.db.Pool().QueryRow(ctx, `SELECT count(*) FROM (
		SELECT project_id, planner_queue_shard(session_id) AS shard, count(*) AS n
		FROM planner_turns WHERE status = 'queued' GROUP BY 1, 2) truth
		FULL JOIN planner_queue_counts c USING (project_id, shard)
		WHERE COALESCE(truth.n, 0) <> COALESCE(c.queued, 0)`).Scan(&wrong); err != nil {
		t.Fatal(err)
	}
	if wrong != 0 {
		t.Errorf("%s: %d project counter shards differ from the queued turns", step, wrong)
	}
	for _, p := range []store.Project{f.project, f.otherProject} {
		var inProject, total int64
		if err := f.db.Pool().QueryRow(ctx, `SELECT
			(SELECT count(*) FROM planner_turns WHERE project_id = $1 AND status = 'queued'),
			(SELECT count(*) FROM planner_turns WHERE status = 'queued')`, p.ID).Scan(&inProject, &total); err != nil {
			t.Fatal(err)
		}
		gotProject, gotTotal, err := f.db.QueuedTurns(ctx, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		if gotProject != inProject || gotTotal != total {
			t.Errorf("%s: counters say %d queued in %s and %d in all, the turns %d and %d",
				step, gotProject, p.Key, gotTotal, inProject, total)
		}
	}
}

// TestQueueCountersFollowTheTurns: after sends, cancels, claims, finishes,
// a crash and its resume, a turn that failed at claim and a deleted
// session, the counters equal the count of queued turns.
func TestQueueCountersFollowTheTurns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newTrackerFixture(t)
	send := func(caller store.Caller, session string, n int) []string {
		t.Helper()
		var turns []string
		for range n {
			res, err := f.db.SendMessage(ctx, caller, session, "hello", "", store.QueueLimits{Total: 1000, PerProject: 1000})
			if err != nil {
				t.Fatal(err)
			}
			turns = append(turns, res.Turn)
		}
		return turns
	}
	newSession := func(caller store.Caller, project string) string {
		t.Helper()
		s, err := f.db.CreateSession(ctx, caller, project, "plan")
		if err != nil {
			t.Fatal(err)
		}
		return s.ID
	}
	claim := func(turn, owner string) store.Fence {
		t.Helper()
		c, err := f.db.ClaimTurn(ctx, turn, owner, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if c.State != store.ClaimRun {
			t.Fatalf("claim of %s: state %v, want run", turn, c.State)
		}
		return c.Fence
	}
	var sessions []string
	var turns [][]string
	for i := range 6 {
		caller, project := f.engineer, "WEB"
		if i%3 == 2 {
			caller, project = f.otherEngineer, "GLX"
		}
		s := newSession(caller, project)
		sessions = append(sessions, s)
		turns = append(turns, send(caller, s, 4))
	}
	assertQueueCounts(t, f, "after sends")

	if _, err := f.db.CancelTurns(ctx, f.engineer, sessions[0], turns[0][2]); err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.CancelTurns(ctx, f.engineer, sessions[1], ""); err != nil {
		t.Fatal(err)
	}
	assertQueueCounts(t, f, "after cancels")

	fence := claim(turns[0][0], "w1")
	assertQueueCounts(t, f, "after a claim")
	if _, _, err := f.db.FinishTurn(ctx, fence, store.TurnOutcome{Status: store.TurnDone, Reason: store.ReasonEndTurn}, nil); err != nil {
		t.Fatal(err)
	}
	fence = claim(turns[0][1], "w1")
	assertQueueCounts(t, f, "after a finish and the next claim")

	// A crash: the worker's lease is handed back, another resumes the turn.
	if err := f.db.HandBack(ctx, fence); err != nil {
		t.Fatal(err)
	}
	fence = claim(turns[0][1], "w2")
	assertQueueCounts(t, f, "after a resume")
	if _, _, err := f.db.FinishTurn(ctx, fence, store.TurnOutcome{Status: store.TurnFailed, Reason: store.ReasonError, Err: "boom"}, nil); err != nil {
		t.Fatal(err)
	}
	assertQueueCounts(t, f, "after a failed finish")

	// A turn tried too often ends as failed straight from the queue.
	if _, err := f.db.Pool().Exec(ctx, `UPDATE planner_turns SET attempts = $2 WHERE id = $1`,
		turns[3][0], store.MaxTurnAttempts); err != nil {
		t.Fatal(err)
	}
	if c, err := f.db.ClaimTurn(ctx, turns[3][0], "w1", time.Minute); err != nil || c.State != store.ClaimFailed {
		t.Fatalf("claim of a turn tried too often: %+v, %v", c.State, err)
	}
	assertQueueCounts(t, f, "after a failed claim")

	// Another project's session goes with its queued turns.
	if _, err := f.db.Pool().Exec(ctx, `DELETE FROM planner_sessions WHERE id = $1`, sessions[2]); err != nil {
		t.Fatal(err)
	}
	assertQueueCounts(t, f, "after a deleted session")
	send(f.engineer, sessions[4], 2)
	assertQueueCounts(t, f, "after more sends")
}

// TestQueueLimitsRefuseAtTheLimit: a send is refused exactly when the
// project's or the whole queue's limit is reached, with the text that names
// the setting; a retried send is still answered; a turn leaving the queue
// makes room.
func TestQueueLimitsRefuseAtTheLimit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		limits store.QueueLimits
		// other turns queued in the other organization first
		other int
		want  string
	}{
		{"project", store.QueueLimits{Total: 100, PerProject: 3}, 2, "project WEB already has 3 queued planner turns (server.max_queued_turns_per_project); wait for some to finish"},
		{"total", store.QueueLimits{Total: 5, PerProject: 100}, 2, "the planner queue is full (5 queued turns, server.max_queued_turns); try again shortly"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newTrackerFixture(t)
			// First come first served: a position counts the session's
			// own turns only (TestQueuedPositionUnderShares has the rest).
			f.db.SetDirectDispatch(true)
			other, err := f.db.CreateSession(ctx, f.otherEngineer, "GLX", "plan")
			if err != nil {
				t.Fatal(err)
			}
			for range tt.other {
				if _, err := f.db.SendMessage(ctx, f.otherEngineer, other.ID, "hi", "", tt.limits); err != nil {
					t.Fatal(err)
				}
			}
			s, err := f.db.CreateSession(ctx, f.engineer, "WEB", "plan")
			if err != nil {
				t.Fatal(err)
			}
			var first store.SendResult
			for i := range 3 {
				res, err := f.db.SendMessage(ctx, f.engineer, s.ID, "hi", "", tt.limits)
				if err != nil {
					t.Fatalf("send %d of 3: %v", i+1, err)
				}
				if i == 0 {
					first = res
				}
			}
			_, err = f.db.SendMessage(ctx, f.engineer, s.ID, "one more", "", tt.limits)
			if !store.IsCode(err, store.CodeExhausted) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("send at the limit: %v, want %s: %q", err, store.CodeExhausted, tt.want)
			}
			again, err := f.db.SendMessage(ctx, f.engineer, s.ID, "hi", first.Turn, tt.limits)
			if err != nil || !again.Existing || again.Turn != first.Turn || again.Seq != first.Seq || again.Position != 0 {
				t.Fatalf("retry at the limit: %+v, %v; want the first turn %+v", again, err, first)
			}
			assertQueueCounts(t, f, "at the limit")
			if c, err := f.db.ClaimTurn(ctx, first.Turn, "w1", time.Minute); err != nil || c.State != store.ClaimRun {
				t.Fatalf("claim: %+v, %v", c.State, err)
			}
			res, err := f.db.SendMessage(ctx, f.engineer, s.ID, "one more", "", tt.limits)
			if err != nil {
				t.Fatalf("send after a turn left the queue: %v", err)
			}
			if res.Position != 3 || res.Head || res.Queued.Position == nil || *res.Queued.Position != 3 {
				t.Fatalf("send after a claim: %+v, want position 3", res)
			}
			assertQueueCounts(t, f, "after the claim")
		})
	}
}

// TestQueueCountsMigrationCountsQueuedTurns: migration 00097 counts the
// turns queued before it.
func TestQueueCountsMigrationCountsQueuedTurns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newTrackerFixture(t)
	file, err := fs.ReadFile(store.Migrations(), "00097_planner_queue_counts.sql")
	if err != nil {
		t.Fatal(err)
	}
	up, down, ok := strings.Cut(string(file), "-- +goose Down")
	if !ok {
		t.Fatal("00097 has no Down section")
	}
	if _, err := f.db.Pool().Exec(ctx, down); err != nil {
		t.Fatalf("down: %v", err)
	}
	// Two sessions' turns stay queued; a third's are cancelled.
	for i, c := range []struct {
		caller  store.Caller
		project string
		sends   int
	}{{f.engineer, "WEB", 3}, {f.otherEngineer, "GLX", 2}, {f.engineer, "WEB", 4}} {
		s, err := f.db.CreateSession(ctx, c.caller, c.project, "plan")
		if err != nil {
			t.Fatal(err)
		}
		for range c.sends {
			if _, err := f.db.SendMessage(ctx, c.caller, s.ID, "hello", "", store.QueueLimits{}); err != nil {
				t.Fatal(err)
			}
		}
		if i == 2 {
			if _, err := f.db.CancelTurns(ctx, c.caller, s.ID, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := f.db.Pool().Exec(ctx, up); err != nil {
		t.Fatalf("up: %v", err)
	}
	assertQueueCounts(t, f, "after the migration")
	if project, total, err := f.db.QueuedTurns(ctx, f.project.ID); err != nil || project != 3 || total != 5 {
		t.Fatalf("after the migration: %d queued in WEB, %d in all (%v), want 3 and 5", project, total, err)
	}
}
