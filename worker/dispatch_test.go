package worker_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/worker"
	"github.com/balletplanner/ballet/worker/dispatch"
)

// fairScript answers every message after a short wait, so that turns
// overlap; "use the slow tool" holds its turn until cancelled.
const fairScript = `
loop: true
answers:
  - match: '^use the slow tool'
    content:
      - tool_use: {name: slow, input: {q: x}}
  - match: '.'
    latency: 150ms
    content:
      - text: "ok"
`

// otherOrg makes a second organization with a project and an engineer of
// its own, and returns the engineer.
func (e *env) otherOrg(orgKey, projectKey, human string) store.Caller {
	e.t.Helper()
	ctx := context.Background()
	sys := store.SystemActor()
	org, err := e.db.CreateOrganization(ctx, orgKey, orgKey, sys)
	must(e.t, err)
	p, err := e.db.CreateProject(ctx, org.ID, projectKey, projectKey, sys)
	must(e.t, err)
	_, err = e.db.CreateRoleBinding(ctx, human, store.RoleEngineer,
		store.Scope{Kind: store.ScopeProject, OrganizationID: org.ID, ProjectID: p.ID}, sys)
	must(e.t, err)
	pr, err := e.db.Principal(ctx, human)
	must(e.t, err)
	return store.HumanCaller(pr)
}

// sendAs sends one message into a new session of project as caller.
func (e *env) sendAs(caller store.Caller, project, text, priority string) (session, turn string) {
	e.t.Helper()
	ctx := context.Background()
	s, err := e.db.CreateSession(ctx, caller, project, "fair")
	must(e.t, err)
	res, err := e.planner.Submit(ctx, caller, store.SendRequest{Session: s.ID, Text: text, Priority: priority})
	must(e.t, err)
	return s.ID, res.Turn
}

// turnTimes are a turn's start and end as stored.
type turnTimes struct {
	id                 string
	project            string
	started, finished  time.Time
	status, doneReason string
}

func (e *env) turnTimes(ids []string) []turnTimes {
	e.t.Helper()
	rows, err := e.db.Pool().Query(context.Background(), `SELECT t.id::text, p.key, t.started_at,
		t.finished_at, t.status, COALESCE(t.done_reason, '') FROM planner_turns t JOIN projects p ON p.id = t.project_id
		WHERE t.id = ANY ($1::uuid[]) ORDER BY t.started_at, t.id`, ids)
	must(e.t, err)
	defer rows.Close()
	var out []turnTimes
	for rows.Next() {
		var tt turnTimes
		var s, f *time.Time
		must(e.t, rows.Scan(&tt.id, &tt.project, &s, &f, &tt.status, &tt.doneReason))
		if s != nil {
			tt.started = *s
		}
		if f != nil {
			tt.finished = *f
		}
		out = append(out, tt)
	}
	must(e.t, rows.Err())
	return out
}

// startWith runs a worker of concurrency n until the test ends.
func (e *env) startWith(n int) *worker.Worker {
	return e.start(func(c *worker.Config, _ *worker.PlannerConfig) { c.Concurrency = n })
}

// TestFairDispatchAcrossOrganizations: with one slot and both
// organizations' turns waiting, the slot alternates between them; first
// come first served would run all six of acme's turns first.
func TestFairDispatchAcrossOrganizations(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fairScript).fair(dispatch.Config{})
	bob := e.otherOrg("beta", "BET", "bob@example.com")
	var acme, beta []string
	for range 6 {
		_, turn := e.sendAs(e.human, "WEB", "plan", "")
		acme = append(acme, turn)
	}
	for range 2 {
		_, turn := e.sendAs(bob, "BET", "plan", "")
		beta = append(beta, turn)
	}
	e.startWith(1)
	all := append(slices.Clone(acme), beta...)
	eventually(t, "every turn to end", func() bool { return allEnded(e.turnTimes(all)) })
	order := e.turnTimes(all)
	for i, tt := range order {
		if tt.project == "BET" && i > 3 {
			t.Fatalf("beta's turn started %d of %d: %v", i+1, len(order), projects(order))
		}
	}
}

// TestFairDispatchCapsHoldTurnsWithoutSlots: a project capped at 2 never
// runs more than 2 turns at once, and the slots it leaves go to another
// project at once: its held turns hold no slot.
func TestFairDispatchCapsHoldTurnsWithoutSlots(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fairScript).fair(dispatch.Config{})
	ctx := context.Background()
	_, err := e.db.CreateProject(ctx, e.project.OrganizationID, "APP", "App", store.SystemActor())
	must(t, err)
	_, err = e.db.CreateRoleBinding(ctx, "ann@example.com", store.RoleEngineer,
		store.Scope{Kind: store.ScopeOrganization, OrganizationID: e.project.OrganizationID}, store.SystemActor())
	must(t, err)
	p, err := e.db.Principal(ctx, "ann@example.com")
	must(t, err)
	ann := store.HumanCaller(p)
	_, err = e.db.Pool().Exec(ctx, `UPDATE projects SET max_running_turns = 2 WHERE key = 'WEB'`)
	must(t, err)
	var ids []string
	for range 8 {
		_, turn := e.sendAs(ann, "WEB", "plan", "")
		ids = append(ids, turn)
	}
	var app []string
	for range 4 {
		_, turn := e.sendAs(ann, "APP", "plan", "")
		app = append(app, turn)
	}
	e.startWith(10)
	all := append(slices.Clone(ids), app...)
	eventually(t, "every turn to end", func() bool { return allEnded(e.turnTimes(all)) })
	times := e.turnTimes(all)
	if n := maxOverlap(times, "WEB"); n > 2 {
		t.Fatalf("WEB ran %d turns at once, cap 2", n)
	}
	var lastWeb time.Time
	for _, tt := range times {
		if tt.project == "WEB" && tt.started.After(lastWeb) {
			lastWeb = tt.started
		}
	}
	for _, tt := range times {
		if tt.project == "APP" && !tt.started.Before(lastWeb) {
			t.Fatalf("APP's turn started after WEB's last: a held WEB turn kept a slot")
		}
	}
}

// TestFairDispatchInteractiveFirst: a human's interactive turn starts
// before the batch turns the same human queued earlier.
func TestFairDispatchInteractiveFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fairScript).fair(dispatch.Config{})
	var ids []string
	for range 3 {
		_, turn := e.sendAs(e.human, "WEB", "plan", store.PriorityBatch)
		ids = append(ids, turn)
	}
	_, inter := e.sendAs(e.human, "WEB", "plan", store.PriorityInteractive)
	e.startWith(1)
	all := append(ids, inter)
	eventually(t, "every turn to end", func() bool { return allEnded(e.turnTimes(all)) })
	if first := e.turnTimes(all)[0]; first.id != inter {
		t.Fatalf("turn %s started first, want the interactive %s", first.id, inter)
	}
	_, err := e.planner.Submit(context.Background(), e.human, store.SendRequest{Session: e.session(), Text: "x", Priority: "urgent"})
	if !store.IsCode(err, store.CodeInvalid) {
		t.Fatalf("priority urgent: %v, want invalid_argument", err)
	}
}

// TestFairCancelOfAHeldTurn: a turn held back for want of a slot is
// cancelled at once, never starts, and never reaches the queue.
func TestFairCancelOfAHeldTurn(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fairScript).fair(dispatch.Config{})
	e.startWith(1)
	busy, running := e.sendAs(e.human, "WEB", "use the slow tool", "")
	<-e.started
	s, held := e.sendAs(e.human, "WEB", "plan", "")
	res := e.cancel(s, held)
	if len(res.Outputs) == 0 || len(res.Running) != 0 {
		t.Fatalf("cancel of the held turn: %+v", res)
	}
	outs := e.outputs(s, held)
	if got := types(outs); !slices.Equal(got, []string{"queued", "done"}) || outs[1].Text != store.ReasonCancelled {
		t.Fatalf("held turn's outputs %v", got)
	}
	if there, err := e.queue.Exists(held); err != nil || there {
		t.Fatalf("the held turn's task: in the queue %v, %v", there, err)
	}
	e.cancel(busy, running)
	e.waitDone(busy, running)
	next := e.send(s, "after")
	e.waitDone(s, next.Turn)
	if tt := e.turnTimes([]string{held}); tt[0].status != "cancelled" || !tt[0].started.IsZero() {
		t.Fatalf("held turn %+v, want cancelled, never started", tt[0])
	}
}

// TestFairDispatchSeveralWorkers: two workers share the pool; one
// dispatcher leads; when its worker stops mid-burst the other takes the
// lead and every turn ends once.
func TestFairDispatchSeveralWorkers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fairScript).fair(dispatch.Config{})
	var ids []string
	sessions := map[string]string{}
	for range 12 {
		s, turn := e.sendAs(e.human, "WEB", "plan", "")
		ids = append(ids, turn)
		sessions[turn] = s
	}
	first := e.startWith(2)
	e.startWith(2)
	eventually(t, "some turns to end", func() bool { return countEnded(e.turnTimes(ids)) >= 3 })
	first.Stop()
	eventually(t, "every turn to end", func() bool { return allEnded(e.turnTimes(ids)) })
	for _, id := range ids {
		outs := e.outputs(sessions[id], id)
		if n := strings.Count(strings.Join(types(outs), ","), "done"); n != 1 || outs[len(outs)-1].Text != "end_turn" {
			t.Fatalf("turn %s outputs %v", id, types(outs))
		}
	}
}

func allEnded(tt []turnTimes) bool { return countEnded(tt) == len(tt) }

func countEnded(tt []turnTimes) int {
	n := 0
	for _, t := range tt {
		if !t.finished.IsZero() {
			n++
		}
	}
	return n
}

func projects(tt []turnTimes) []string {
	var out []string
	for _, t := range tt {
		out = append(out, t.project)
	}
	return out
}

// maxOverlap is the most turns of project that ran at once.
func maxOverlap(tt []turnTimes, project string) int {
	most := 0
	for _, a := range tt {
		if a.project != project {
			continue
		}
		n := 0
		for _, b := range tt {
			if b.project == project && !b.started.After(a.started) && b.finished.After(a.started) {
				n++
			}
		}
		most = max(most, n)
	}
	return most
}
