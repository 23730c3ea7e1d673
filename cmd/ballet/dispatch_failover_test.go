package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
)

// dispatchResumeBound is the bound: killing the dispatcher must not
// stop dispatch for longer than a crashed worker's resume bound. It is a
// correctness bound, ten times the standbys' campaign interval, not a
// performance measurement.
const dispatchResumeBound = 5 * time.Second

// dispatchLockKey is the advisory lock the leading dispatcher holds
// (store/planner_dispatch.go).
const dispatchLockKey int64 = 0x62616c6c6574_03

// leaders are the processes whose dispatcher reports that it leads.
func leaders(t *testing.T, ps []*process) []*process {
	t.Helper()
	var out []*process
	for _, p := range ps {
		if p.metric(t, "ballet_planner_dispatcher_leader") == 1 {
			out = append(out, p)
		}
	}
	return out
}

// tasksInQueue are the ids of the planner queue's tasks that wait or run.
func (s *stack) tasksInQueue(t *testing.T) map[string]bool {
	t.Helper()
	insp := asynq.NewInspectorFromRedisClient(s.rdb)
	out := map[string]bool{}
	lists := []func(string, ...asynq.ListOption) ([]*asynq.TaskInfo, error){
		insp.ListPendingTasks, insp.ListActiveTasks, insp.ListScheduledTasks, insp.ListRetryTasks}
	for _, list := range lists {
		infos, err := list(s.names.Queue(), asynq.PageSize(10000))
		if err != nil && !errors.Is(err, asynq.ErrQueueNotFound) {
			t.Fatalf("list the queue's tasks: %v", err)
		}
		for _, i := range infos {
			out[i.ID] = true
		}
	}
	return out
}

// failoverTurn is a planner_turns row as the failover test checks it.
type failoverTurn struct {
	id, session    string
	position       int64
	status, reason string
	started        *time.Time
	finished       *time.Time
	dones, answers int
	humans         int
	readyAt        *time.Time
}

// A burst of turns across two organizations, several sessions and several
// turns queued behind each other in some sessions; the worker whose
// dispatcher leads is SIGKILLed mid-burst and replaced. A standby takes the
// lead and dispatches again within the bound, and every turn still ends
// done (end_turn) exactly once, in order within its session, one at a time,
// none stranded.
func TestDispatchFailoverAfterTheLeaderIsKilled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStack(t, "loop: true\nanswers:\n  - latency: 300ms\n    content:\n      - text: ok\n")
	s.env = append(s.env, "BALLET_WORKER_CONCURRENCY=3", "BALLET_SCHEDULER_MODE=fair")

	// A second organization with a project and a human of its own.
	sys := store.SystemActor()
	org2, err := s.db.CreateOrganization(ctx, "globex", "Globex", sys)
	must(t, err)
	p2, err := s.db.CreateProject(ctx, org2.ID, "OPS", "Ops", sys)
	must(t, err)
	_, err = s.db.CreateRoleBinding(ctx, "bob@example.com", store.RoleEngineer,
		store.Scope{Kind: store.ScopeProject, OrganizationID: org2.ID, ProjectID: p2.ID}, sys)
	must(t, err)
	pr2, err := s.db.Principal(ctx, "bob@example.com")
	must(t, err)
	bob := store.HumanCaller(pr2)

	workers := []*process{s.worker(), s.worker()}
	var leader *process
	storetest.WaitFor(t, "one dispatcher to lead", func() bool {
		l := leaders(t, workers)
		if len(l) == 1 {
			leader = l[0]
		}
		return len(l) == 1
	})

	// 60 turns: 15 sessions per organization holding 1, 2 and 3 turns in
	// turn, sent in parallel across sessions and in order within each.
	type plan struct {
		caller  store.Caller
		session string
		turns   int
	}
	var plans []plan
	for i := range 30 {
		caller, project := s.human, "WEB"
		if i%2 == 1 {
			caller, project = bob, "OPS"
		}
		sess, err := s.db.CreateSession(ctx, caller, project, fmt.Sprintf("burst %d", i))
		must(t, err)
		plans = append(plans, plan{caller: caller, session: sess.ID, turns: 1 + (i/2)%3})
	}
	total := 0
	for _, p := range plans {
		total += p.turns
	}
	if total != 60 {
		t.Fatalf("the burst has %d turns, want 60", total)
	}
	var wg sync.WaitGroup
	errs := make(chan error, total)
	for _, p := range plans {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range p.turns {
				if _, err := s.planner.Send(ctx, p.caller, p.session, fmt.Sprintf("message %d", k), ""); err != nil {
					errs <- fmt.Errorf("send to %s: %w", p.session, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	count := func(where string) int {
		t.Helper()
		var n int
		must(t, s.db.Pool().QueryRow(ctx, `SELECT count(*) FROM planner_turns WHERE `+where).Scan(&n))
		return n
	}
	// Ready and not claimed: held back, or dispatched with its task not yet
	// taken by a worker (the dispatcher marks nothing in Postgres).
	const ready = `finished_at IS NULL AND ready_at IS NOT NULL AND status = 'queued'`
	storetest.WaitFor(t, "some turns done and many still ready", func() bool {
		return count(`finished_at IS NOT NULL`) >= 8 && count(ready) >= 8
	})

	// The backend whose session holds the leader's lock.
	var lockPid int
	must(t, s.db.Pool().QueryRow(ctx, `SELECT l.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND l.classid::text::bigint = ($1::bigint >> 32) AND l.objid::text::bigint = ($1::bigint & 4294967295)
		  AND a.application_name = $2`, dispatchLockKey, store.DispatchListenerName).Scan(&lockPid))

	// Kill the leader, and read the database's clock once it is gone.
	victim := slices.Index(workers, leader)
	must(t, leader.cmd.Process.Signal(syscall.SIGKILL))
	exited := <-leader.done
	leader.done <- exited // for the cleanup
	var killedAt time.Time
	must(t, s.db.Pool().QueryRow(ctx, `SELECT now()`).Scan(&killedAt))
	// Once its backend is gone, a statement the dead leader had sent has
	// committed or not: a turn still ready now can only be dispatched by a
	// new leader. (It also shows the lock was the killed process's.)
	storetest.WaitFor(t, "the killed leader's backend to end", func() bool {
		var alive bool
		must(t, s.db.Pool().QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)`, lockPid).Scan(&alive))
		return !alive
	})
	// The turns held back at the kill: ready, without a task in the queue
	// (the queue is read first, so a turn dispatched meanwhile by a new
	// leader counts as held back, as it was).
	inQueue := s.tasksInQueue(t)
	var readyAtKill []string
	rows, err := s.db.Pool().Query(ctx, `SELECT id::text FROM planner_turns WHERE `+ready)
	must(t, err)
	for rows.Next() {
		var id string
		must(t, rows.Scan(&id))
		if !inQueue[id] {
			readyAtKill = append(readyAtKill, id)
		}
	}
	must(t, rows.Err())
	doneAtKill := count(`finished_at IS NOT NULL`)
	if len(readyAtKill) == 0 {
		t.Fatalf("no turn ready at the kill (%d done)", doneAtKill)
	}
	workers[victim] = s.worker()

	// Dispatch resumes: a turn held back at the kill is dispatched, and a
	// worker starts it (started_at: the dispatch itself leaves no mark).
	var first time.Time
	storetest.WaitFor(t, "a turn held back at the kill to start", func() bool {
		var at *time.Time
		must(t, s.db.Pool().QueryRow(ctx, `SELECT min(started_at) FROM planner_turns WHERE id = ANY ($1::uuid[])`,
			readyAtKill).Scan(&at))
		if at != nil && !at.After(killedAt) {
			t.Fatalf("a turn held back after the killed leader's backend ended started at %s, before the kill at %s", at, killedAt)
		}
		if at != nil {
			first = *at
		}
		return at != nil
	})
	var anyFirst time.Time
	must(t, s.db.Pool().QueryRow(ctx, `SELECT min(started_at) FROM planner_turns WHERE started_at > $1`, killedAt).Scan(&anyFirst))
	took := first.Sub(killedAt)
	t.Logf("kill → first start of a turn held back once the killed leader's backend ended: %s (any start after the kill: %s); %d done and %d held back at the kill",
		took.Round(time.Millisecond), anyFirst.Sub(killedAt).Round(time.Millisecond), doneAtKill, len(readyAtKill))
	if took > dispatchResumeBound {
		t.Errorf("dispatch stopped for %s after the leader was killed, want under %s", took, dispatchResumeBound)
	}
	storetest.WaitFor(t, "a surviving dispatcher to lead", func() bool { return len(leaders(t, workers)) == 1 })
	who := "surviving"
	if leaders(t, workers)[0] == workers[victim] {
		who = "replacement" // it campaigns at once when it starts
	}
	// One takeover after the kill, no lead passed back and forth: the
	// survivor never led before, the replacement is new.
	takeovers := 0.0
	for _, p := range workers {
		takeovers += p.metric(t, "ballet_planner_dispatch_takeovers_total")
	}
	t.Logf("the %s worker leads now; takeovers since the kill: %v", who, takeovers)
	if takeovers != 1 {
		t.Errorf("%v takeovers among the live workers after the kill, want 1", takeovers)
	}

	// Every turn ends; none is stranded.
	storetest.WaitFor(t, "every turn of the burst to end", func() bool { return count(`finished_at IS NULL`) == 0 })

	var turns []failoverTurn
	rows, err = s.db.Pool().Query(ctx, `SELECT t.id::text, t.session_id::text, t.position, t.status, COALESCE(t.done_reason, ''),
			t.started_at, t.finished_at, t.ready_at,
			(SELECT count(*) FROM planner_outputs o WHERE o.turn_id = t.id AND o.type = 'done'),
			(SELECT count(*) FROM planner_messages m WHERE m.turn_id = t.id AND m.role = 'assistant'),
			(SELECT count(*) FROM planner_messages m WHERE m.turn_id = t.id AND m.role = 'user')
		FROM planner_turns t ORDER BY t.session_id, t.position`)
	must(t, err)
	for rows.Next() {
		var r failoverTurn
		must(t, rows.Scan(&r.id, &r.session, &r.position, &r.status, &r.reason, &r.started, &r.finished, &r.readyAt,
			&r.dones, &r.answers, &r.humans))
		turns = append(turns, r)
	}
	must(t, rows.Err())
	if len(turns) != total {
		t.Fatalf("%d turns stored, want %d", len(turns), total)
	}
	perSession := map[string][]failoverTurn{}
	for _, r := range turns {
		if r.status != "done" || r.reason != "end_turn" || r.dones != 1 || r.answers != 1 || r.humans != 1 ||
			r.started == nil || r.finished == nil {
			t.Errorf("turn %s (session %s, position %d): status %s, reason %q, %d done outputs, %d answers, %d human messages, started %v, finished %v",
				r.id, r.session, r.position, r.status, r.reason, r.dones, r.answers, r.humans, r.started, r.finished)
			continue
		}
		perSession[r.session] = append(perSession[r.session], r)
	}
	for _, p := range plans {
		ts := perSession[p.session]
		if len(ts) != p.turns {
			t.Errorf("session %s: %d turns done, want %d", p.session, len(ts), p.turns)
			continue
		}
		for i := 1; i < len(ts); i++ {
			prev, cur := ts[i-1], ts[i]
			// One turn at a time, in position order: the next starts only
			// after its predecessor finished.
			if !cur.started.After(*prev.finished) {
				t.Errorf("session %s: turn %d started at %s, before turn %d finished at %s (it started at %s)",
					p.session, cur.position, cur.started.Format(time.StampMicro), prev.position,
					prev.finished.Format(time.StampMicro), prev.started.Format(time.StampMicro))
			}
		}
		var msgs int
		must(t, s.db.Pool().QueryRow(ctx, `SELECT count(*) FROM planner_messages WHERE session_id = $1`, p.session).Scan(&msgs))
		if msgs != 2*p.turns {
			t.Errorf("session %s: %d messages, want %d (a question and an answer per turn)", p.session, msgs, 2*p.turns)
		}
		outs, err := s.db.Outputs(ctx, p.session, 0, 100000)
		must(t, err)
		for _, o := range outs {
			if o.Type == store.OutputDone && o.Text != "end_turn" {
				t.Errorf("session %s: turn %s done with %q", p.session, o.Turn, o.Text)
			}
		}
	}
	if t.Failed() {
		for i, p := range workers {
			t.Logf("worker %d log:\n%s", i, p.log())
		}
		t.Logf("killed leader's log:\n%s", leader.log())
	}
}
