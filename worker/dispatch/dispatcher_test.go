package dispatch_test

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/balletplanner/ballet/internal/promread"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
	"github.com/balletplanner/ballet/tasks"
	"github.com/balletplanner/ballet/worker/dispatch"
)

// lossyQueue is a task queue whose first enqueues are lost, as Redis
// loses tasks when it loses its data, or refused, as a Redis that is down.
type lossyQueue struct {
	mu     sync.Mutex
	lose   int // enqueues answered ok and lost
	refuse int // enqueues refused with an error
	kept   []string
	calls  []string // "enqueue <turn>" and "fresh <turn>", in order
}

func (q *lossyQueue) Enqueue(_ context.Context, _, turn, _ string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.calls = append(q.calls, "enqueue "+turn)
	switch {
	case q.refuse > 0:
		q.refuse--
		return errors.New("redis: connection refused")
	case q.lose > 0:
		q.lose--
		return nil
	}
	q.kept = append(q.kept, turn)
	return nil
}

func (q *lossyQueue) EnqueueFresh(_ context.Context, _, turn, id string) (string, tasks.Resumed, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.calls = append(q.calls, "fresh "+turn)
	q.kept = append(q.kept, turn)
	return id, tasks.ResumeEnqueued, nil
}

func (q *lossyQueue) snapshot() (kept, calls []string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]string(nil), q.kept...), append([]string(nil), q.calls...)
}

// dispatcherFixture is a database with a worker's slots and one turn ready,
// and a dispatcher feeding q.
func dispatcherFixture(t *testing.T, q *lossyQueue) (db *store.DB, turn string, reg *prometheus.Registry) {
	t.Helper()
	ctx := context.Background()
	db = storetest.New(t)
	sys := store.SystemActor()
	org, err := db.CreateOrganization(ctx, "acme", "Acme", sys)
	if err != nil {
		t.Fatal(err)
	}
	p, err := db.CreateProject(ctx, org.ID, "WEB", "Web", sys)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateRoleBinding(ctx, "ann@example.com", store.RoleEngineer,
		store.Scope{Kind: store.ScopeProject, OrganizationID: org.ID, ProjectID: p.ID}, sys); err != nil {
		t.Fatal(err)
	}
	pr, err := db.Principal(ctx, "ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	caller := store.HumanCaller(pr)
	if err := db.BeatSlots(ctx, "worker-1", 4, time.Hour); err != nil {
		t.Fatal(err)
	}
	reg = prometheus.NewRegistry()
	m, err := dispatch.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	d := dispatch.New(db, q, dispatch.Config{Mode: dispatch.ModeFair}, m, slog.Default())
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	s, err := db.CreateSession(ctx, caller, "WEB", "lost")
	if err != nil {
		t.Fatal(err)
	}
	res, err := db.Send(ctx, caller, store.SendRequest{Session: s.ID, Text: "hello"}, store.QueueLimits{})
	if err != nil {
		t.Fatal(err)
	}
	return db, res.Turn, reg
}

// cpuSeconds reads ballet_planner_dispatcher_cpu_seconds_total{work}.
func cpuSeconds(t *testing.T, reg *prometheus.Registry, work string) float64 {
	t.Helper()
	v, found, err := promread.Counter(reg, "ballet_planner_dispatcher_cpu_seconds_total", "work", work)
	if err != nil || !found {
		t.Fatalf("ballet_planner_dispatcher_cpu_seconds_total{work=%q}: found %v, %v", work, found, err)
	}
	return v
}

// A dispatched turn whose task never reaches a worker (lost by Redis, or
// refused by it) is enqueued again by the leading dispatcher, which marks
// nothing in Postgres: the turn stays queued until a worker claims it.
func TestDispatcherSeesToTasksNoWorkerClaimed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		queue *lossyQueue
		// want is the order of the queue calls for the turn.
		want []string
	}{
		{"lost by Redis: enqueued fresh once unclaimed", &lossyQueue{lose: 1}, []string{"enqueue", "fresh"}},
		{"refused by Redis: enqueued again", &lossyQueue{refuse: 1}, []string{"enqueue", "enqueue"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			db, turn, reg := dispatcherFixture(t, tt.queue)
			storetest.WaitFor(t, "the turn's task to be kept by the queue", func() bool {
				kept, _ := tt.queue.snapshot()
				return len(kept) > 0
			})
			// Later calls (a fresh task every confirmAfter while no worker
			// claims the turn) may follow on a slow machine; the first
			// two are the dispatch and its repair.
			kept, calls := tt.queue.snapshot()
			var got []string
			for _, c := range calls {
				verb, id, _ := strings.Cut(c, " ")
				if id != turn {
					t.Fatalf("queue call %q for another turn than %s", c, turn)
				}
				got = append(got, verb)
			}
			if len(got) < 2 || got[0] != tt.want[0] || got[1] != tt.want[1] || kept[0] != turn {
				t.Fatalf("queue calls %v (kept %v), want them to start with %v", calls, kept, tt.want)
			}
			var status string
			var enqueued *time.Time
			if err := db.Pool().QueryRow(context.Background(), `SELECT status, enqueued_at FROM planner_turns WHERE id = $1`, turn).
				Scan(&status, &enqueued); err != nil {
				t.Fatal(err)
			}
			if status != "queued" || enqueued != nil {
				t.Fatalf("turn %s, enqueued_at %v: want it queued and unmarked until a worker claims it", status, enqueued)
			}
			// The dispatcher's goroutines count their CPU (its enqueues
			// apart, under work="enqueue", read here to show it exists).
			if runtime.GOOS == "linux" {
				storetest.WaitFor(t, "the dispatcher's CPU to be counted", func() bool {
					return cpuSeconds(t, reg, "schedule") > 0 && cpuSeconds(t, reg, "enqueue") >= 0
				})
			}
		})
	}
}
