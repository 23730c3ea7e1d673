package store_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/balletplanner/ballet/store"
)

// TestTakeDueHeadsTakesEachHeadOnce: of many sweepers taking due heads at
// the same moment, exactly one gets each session's next turn; the turns
// queued behind it, and a head marked a moment ago, are never taken.
func TestTakeDueHeadsTakesEachHeadOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newTrackerFixture(t)
	var heads, behind []string
	for range 5 {
		s, err := f.db.CreateSession(ctx, f.engineer, "WEB", "plan")
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			res, err := f.db.SendMessage(ctx, f.engineer, s.ID, "hello", "", store.QueueLimits{})
			if err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				heads = append(heads, res.Turn)
			} else {
				behind = append(behind, res.Turn)
			}
		}
	}
	// The heads were marked enqueued a while ago; the last one just now.
	if _, err := f.db.Pool().Exec(ctx, `UPDATE planner_turns SET enqueued_at = now() - interval '1 minute'
		WHERE id = ANY($1::uuid[])`, heads[:len(heads)-1]); err != nil {
		t.Fatal(err)
	}
	const sweepers = 8
	var mu sync.Mutex
	var taken []string
	var wg sync.WaitGroup
	errs := make(chan error, sweepers)
	for range sweepers {
		wg.Go(func() {
			refs, err := f.db.TakeDueHeads(ctx, 2*time.Second, 100)
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, r := range refs {
				taken = append(taken, r.Turn)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	slices.Sort(taken)
	want := slices.Clone(heads[:len(heads)-1])
	slices.Sort(want)
	if !slices.Equal(taken, want) {
		t.Fatalf("taken %v\nwant each due head once: %v (not %v behind them, nor the fresh head %s)",
			taken, want, behind, heads[len(heads)-1])
	}
	// Taking marks them: none is due again until the recheck has passed.
	again, err := f.db.TakeDueHeads(ctx, 2*time.Second, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 0 {
		t.Fatalf("taken again at once: %+v", again)
	}
}

// BenchmarkTakeDueHeads measures one sweep of due heads (a batch of 100
// taken and marked) under a full default backlog: 9,500 queued turns in
// 1,000 sessions, half of them behind a running turn, the other half behind
// a queued head.
func BenchmarkTakeDueHeads(b *testing.B) {
	ctx := context.Background()
	f := newTrackerFixture(b)
	s, err := f.db.CreateSession(ctx, f.engineer, "WEB", "plan")
	if err != nil {
		b.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO planner_sessions (project_id, title, created_by)
		SELECT project_id, 'bench ' || g, created_by FROM planner_sessions, generate_series(1, 1000) g WHERE id = $1`,
		`INSERT INTO planner_turns (id, session_id, project_id, position, message_seq, author, status, started_at, enqueued_at, created_at)
		SELECT gen_random_uuid(), s.id, s.project_id, 1, 1, 'eng@example.com',
		       CASE WHEN n % 2 = 0 THEN 'running' ELSE 'queued' END, CASE WHEN n % 2 = 0 THEN now() END,
		       now() - interval '1 minute' + n * interval '1 ms', now() - interval '1 minute'
		FROM (SELECT id, project_id, row_number() OVER (ORDER BY id) AS n FROM planner_sessions
		      WHERE title LIKE 'bench %' AND $1::uuid IS NOT NULL) s`,
		`INSERT INTO planner_turns (id, session_id, project_id, position, message_seq, author, created_at)
		SELECT gen_random_uuid(), s.id, s.project_id, 1 + g, 1 + g, 'eng@example.com', now() - interval '1 minute'
		FROM planner_sessions s, generate_series(1, 9) g WHERE s.title LIKE 'bench %' AND $1::uuid IS NOT NULL`,
	} {
		if _, err := f.db.Pool().Exec(ctx, q, s.ID); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := f.db.Pool().Exec(ctx, `ANALYZE planner_turns`); err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name    string
		recheck time.Duration
		want    int
	}{
		// Every head is due again at once: each sweep takes the 100 oldest.
		{name: "100 due", recheck: 0, want: 100},
		// The usual case: every head was looked at within the recheck.
		{name: "none due", recheck: time.Hour, want: 0},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				refs, err := f.db.TakeDueHeads(ctx, bc.recheck, 100)
				if err != nil {
					b.Fatal(err)
				}
				if len(refs) != bc.want {
					b.Fatalf("took %d heads, want %d", len(refs), bc.want)
				}
			}
		})
	}
}

// TestForgetWorkersKeepsLeaseHolders: of workers whose beat expired long
// ago, ForgetWorkers deletes those that hold no lease (one never claimed,
// one finished its turn) and keeps those whose session lease is still
// theirs (one running its turn, one that handed its lease back), found
// through the running turns.
func TestForgetWorkersKeepsLeaseHolders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newTrackerFixture(t)
	claim := func(owner string) store.Fence {
		t.Helper()
		s, err := f.db.CreateSession(ctx, f.engineer, "WEB", "plan")
		if err != nil {
			t.Fatal(err)
		}
		res, err := f.db.SendMessage(ctx, f.engineer, s.ID, "hello", "", store.QueueLimits{})
		if err != nil {
			t.Fatal(err)
		}
		c, err := f.db.ClaimTurn(ctx, res.Turn, owner, time.Minute)
		if err != nil || c.State != store.ClaimRun {
			t.Fatalf("claim for %s: %v, state %v", owner, err, c.State)
		}
		return c.Fence
	}
	for _, w := range []string{"idle", "running", "handed-back", "finished"} {
		if err := f.db.Beat(ctx, w, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	claim("running")
	if err := f.db.HandBack(ctx, claim("handed-back")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.db.FinishTurn(ctx, claim("finished"), store.TurnOutcome{Status: store.TurnDone,
		Reason: store.ReasonEndTurn}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.Pool().Exec(ctx, `UPDATE planner_workers SET expires_at = now() - interval '1 hour'`); err != nil {
		t.Fatal(err)
	}
	if err := f.db.ForgetWorkers(ctx, time.Now().Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	rows, err := f.db.Pool().Query(ctx, `SELECT id FROM planner_workers ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		kept = append(kept, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if want := []string{"handed-back", "running"}; !slices.Equal(kept, want) {
		t.Fatalf("workers kept %v, want the lease holders %v", kept, want)
	}
}
