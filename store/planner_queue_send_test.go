package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/balletplanner/ballet/store"
)

// tracedDB opens a second pool on the fixture's database whose round trips
// are counted.
func tracedDB(t testing.TB, f *trackerFixture) (*store.DB, *roundTrips) {
	t.Helper()
	tr := &roundTrips{}
	cfg := store.DefaultConfig()
	cfg.URL = f.db.Pool().Config().ConnString()
	cfg.Migrate = false
	cfg.Tracer = tr
	cfg.MaxConns = 1 // one connection: its statements are prepared after the first send
	db, err := store.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return db, tr
}

// TestSendRoundTrips: a send is four round trips to Postgres — the session
// and its permissions, BEGIN with the one write of the session row, one
// batch of the limit check and the inserts, commit — with a limit set or not, and
// stores the queued output it returns.
func TestSendRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newTrackerFixture(t)
	db, tr := tracedDB(t, f)
	s, err := f.db.CreateSession(ctx, f.engineer, "WEB", "plan")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		limits store.QueueLimits
		// statements: the batch holds the limit check only when a limit is set
		statements int
	}{
		{"no limit", store.QueueLimits{}, 5},
		{"limits", store.QueueLimits{Total: 1000, PerProject: 1000}, 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The first send prepares its statements.
			if _, err := db.SendMessage(ctx, f.engineer, s.ID, "warm", "", tt.limits); err != nil {
				t.Fatal(err)
			}
			tr.take()
			res, err := db.SendMessage(ctx, f.engineer, s.ID, "hello", "", tt.limits)
			if err != nil {
				t.Fatal(err)
			}
			// The permission check reads what the session row's UPDATE
			// returns, in the first round trip.
			if trips, statements := tr.take(); trips != 3 || statements != tt.statements {
				t.Errorf("a send took %d round trips and %d statements, want 3 and %d", trips, statements, tt.statements)
			}
			stored, err := f.db.Outputs(ctx, s.ID, res.Queued.Cursor-1, 1)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := json.Marshal(stored)
			want, _ := json.Marshal([]store.Output{res.Queued})
			if string(got) != string(want) {
				t.Errorf("stored queued output %s, the send returned %s", got, want)
			}
		})
	}
}

// BenchmarkSendWithQueued measures a send (with the api's limits set) with
// no turns queued and with 10,000 queued in other sessions of the project,
// in the same run; p50-ns is the median send.
func BenchmarkSendWithQueued(b *testing.B) {
	ctx := context.Background()
	f := newTrackerFixture(b)
	limits := store.QueueLimits{Total: 1 << 30, PerProject: 1 << 30}
	for _, queued := range []int{0, 10000} {
		b.Run(fmt.Sprintf("queued=%d", queued), func(b *testing.B) {
			if _, err := f.db.Pool().Exec(ctx, `UPDATE planner_turns SET status = 'cancelled', finished_at = now()
				WHERE status = 'queued'`); err != nil {
				b.Fatal(err)
			}
			fillQueue(b, f, queued)
			// Sends go round a few sessions, so that no session's own
			// backlog grows long.
			var sessions []string
			for range 64 {
				s, err := f.db.CreateSession(ctx, f.engineer, "WEB", "bench")
				if err != nil {
					b.Fatal(err)
				}
				sessions = append(sessions, s.ID)
			}
			took := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				start := time.Now()
				if _, err := f.db.SendMessage(ctx, f.engineer, sessions[i%len(sessions)], "hello", "", limits); err != nil {
					b.Fatal(err)
				}
				took = append(took, time.Since(start))
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Nanoseconds()), "p50-ns")
		})
	}
}

// fillQueue queues n turns in sessions of the project beside the
// benchmark's, a hundred a session.
func fillQueue(b *testing.B, f *trackerFixture, n int) {
	b.Helper()
	if n == 0 {
		return
	}
	_, err := f.db.Pool().Exec(context.Background(), `
		WITH s AS (
			INSERT INTO planner_sessions (project_id, title, created_by)
			SELECT $1, 'backlog', 'eng@example.com' FROM generate_series(1, ($2 + 99) / 100)
			RETURNING id),
		numbered AS (SELECT id, row_number() OVER () - 1 AS k FROM s)
		INSERT INTO planner_turns (id, session_id, project_id, position, message_seq, author)
		SELECT gen_random_uuid(), numbered.id, $1, g + 1, g + 1, 'eng@example.com'
		FROM numbered, generate_series(0, 99) g WHERE numbered.k * 100 + g < $2`, f.project.ID, n)
	if err != nil {
		b.Fatal(err)
	}
}

// TestConcurrentSends: sends racing in one session get the positions 0, 1,
// 2 … each once and one head; racing retries of one client turn id make one
// turn; the same client id racing in several sessions makes a turn in each.
func TestConcurrentSends(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newTrackerFixture(t)
	// Heads are what direct dispatch enqueues at once; fair dispatch's
	// readiness is the dispatcher's tests' (worker/dispatch_test.go).
	f.db.SetDirectDispatch(true)
	limits := store.QueueLimits{Total: 1000, PerProject: 1000}
	race := func(n int, send func(i int) (store.SendResult, error)) []store.SendResult {
		t.Helper()
		out := make([]store.SendResult, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { out[i], errs[i] = send(i) })
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		return out
	}
	newSession := func() string {
		t.Helper()
		s, err := f.db.CreateSession(ctx, f.engineer, "WEB", "plan")
		if err != nil {
			t.Fatal(err)
		}
		return s.ID
	}

	s := newSession()
	got := race(12, func(int) (store.SendResult, error) {
		return f.db.SendMessage(ctx, f.engineer, s, "hello", "", limits)
	})
	var positions []int64
	heads := 0
	for _, r := range got {
		positions = append(positions, r.Position)
		if r.Head {
			heads++
		}
		if r.Queued.Position == nil || *r.Queued.Position != r.Position {
			t.Errorf("send %+v: its queued output's position differs", r)
		}
	}
	slices.Sort(positions)
	if want := []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}; !slices.Equal(positions, want) || heads != 1 {
		t.Errorf("racing sends got positions %v and %d heads, want %v and one", positions, heads, want)
	}

	client := "0b8d5c3e-2f5a-4c61-9d0e-6f1e2a3b4c5d"
	s = newSession()
	got = race(8, func(int) (store.SendResult, error) {
		return f.db.SendMessage(ctx, f.engineer, s, "hello", client, limits)
	})
	fresh := 0
	for _, r := range got {
		if !r.Existing {
			fresh++
		}
		if r.Turn != client || r.Seq != got[0].Seq {
			t.Errorf("retry %+v is not the turn %s", r, client)
		}
	}
	if fresh != 1 {
		t.Errorf("%d of 8 racing retries made a turn, want 1", fresh)
	}

	var sessions []string
	for range 6 {
		sessions = append(sessions, newSession())
	}
	other := "5e6f7a8b-9c0d-4e1f-8a2b-3c4d5e6f7a8b"
	got = race(len(sessions), func(i int) (store.SendResult, error) {
		return f.db.SendMessage(ctx, f.engineer, sessions[i], "hello", other, limits)
	})
	turns := map[string]bool{}
	for _, r := range got {
		if r.Existing {
			t.Errorf("send %+v in a session of its own is a retry", r)
		}
		turns[r.Turn] = true
	}
	if len(turns) != len(sessions) {
		t.Errorf("the same client id in %d sessions made %d turns", len(sessions), len(turns))
	}
	assertQueueCounts(t, f, "after racing sends")
}
