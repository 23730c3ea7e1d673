package worker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tools"
	"github.com/balletplanner/ballet/worker"
)

// plannerTools makes the env's workers use the planner's real tools.
func (e *env) plannerTools() {
	e.t.Helper()
	reg, err := tools.Planner(e.log)
	must(e.t, err)
	e.deps.Tools = reg
}

// idleWorker is a worker that is not started: the test runs its turns with
// RunTurn, in the test's goroutine.
func (e *env) idleWorker() *worker.Worker {
	e.t.Helper()
	cfg := worker.DefaultConfig()
	cfg.Lease = 2 * time.Second
	pc := worker.DefaultPlannerConfig()
	pc.Model = "fake-model"
	d := e.deps
	d.Registry = prometheus.NewRegistry()
	w, err := worker.New(cfg, pc, 2*time.Second, d)
	must(e.t, err)
	return w
}

func (e *env) count(sql string, args ...any) int {
	e.t.Helper()
	var n int
	must(e.t, e.db.Pool().QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

func toolResults(outs []store.Output) []store.Output {
	var rs []store.Output
	for _, o := range outs {
		if o.Type == store.OutputToolResult {
			rs = append(rs, o)
		}
	}
	return rs
}

const twoNotes = `
answers:
  - match: 'forbidden'
    content:
      - text: "I may no longer write knowledge."
  - match: 'tool_result create_knowledge.*"title":"first"'
    content:
      - tool_use: {name: create_knowledge, input: {kind: note, title: second, body: "Second note."}}
  - match: 'tool_result create_knowledge'
    content:
      - text: "Both noted."
  - match: '^write'
    content:
      - tool_use: {name: create_knowledge, input: {kind: note, title: first, body: "First note."}}
`

// A binding removed while a turn runs holds for the turn's next tool call:
// each call is authorized against the bindings as they are then.
func TestRemovedBindingStopsTheTurnsNextToolCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, twoNotes)
	e.plannerTools()
	// Ann can still read the organization once her engineer binding is gone,
	// so the refusal is forbidden rather than not found.
	_, err := e.db.CreateRoleBinding(ctx, "ann@example.com", store.RoleViewer,
		store.Scope{Kind: store.ScopeOrganization, OrganizationID: e.project.OrganizationID}, store.SystemActor())
	must(t, err)
	var engineer string
	for _, b := range e.human.Principal.Bindings {
		if b.Role == store.RoleEngineer {
			engineer = b.ID
		}
	}
	e.start()
	s := e.session()
	removed := make(chan error, 1)
	worker.SetToolHooks(t, s, worker.ToolHooks{AfterResult: func(toolUseID string) {
		if len(removed) == 0 {
			_, err := e.db.DeleteRoleBinding(ctx, engineer, store.SystemActor())
			removed <- err
		}
	}})
	outs := e.waitDone(s, e.send(s, "write two notes").Turn)
	must(t, <-removed)
	rs := toolResults(outs)
	if len(rs) != 2 || rs[0].IsError {
		t.Fatalf("tool results %+v, want two, the first one good", rs)
	}
	if !rs[1].IsError || !strings.Contains(rs[1].Text, "forbidden") {
		t.Fatalf("second tool result %+v, want a forbidden error", rs[1])
	}
	if n := e.count(`SELECT count(*) FROM knowledge_entries`); n != 1 {
		t.Fatalf("%d knowledge entries, want 1: the second call was let through", n)
	}
	if done := outs[len(outs)-1]; done.Text != store.ReasonEndTurn {
		t.Fatalf("done %q", done.Text)
	}
}

const oneNote = `
answers:
  - match: 'tool_result create_knowledge'
    content:
      - text: "Noted."
  - match: '^write'
    content:
      - tool_use: {name: create_knowledge, input: {kind: note, title: first, body: "First note."}}
`

// A worker that dies after a tool's write and before its result is stored
// must leave neither behind; the resumed turn then runs the call once, and
// its effect and result are there exactly once.
func TestToolEffectAndResultCommitTogether(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, oneNote)
	e.plannerTools()
	w := e.idleWorker()
	s := e.session()
	turn := e.send(s, "write one note").Turn

	crash, die := context.WithCancel(ctx)
	defer die()
	crashed := false
	worker.SetToolHooks(t, s, worker.ToolHooks{BeforeCommit: func(context.Context, string) error {
		if crashed {
			return nil
		}
		crashed = true
		die() // the worker is gone: nothing after this point is written
		return errors.New("worker killed")
	}})
	if err := w.RunTurn(crash, s, turn); err == nil {
		t.Fatal("the crashed attempt reports success")
	}
	if !crashed {
		t.Fatal("the tool call never reached its commit")
	}
	if n := e.count(`SELECT count(*) FROM knowledge_entries`); n != 0 {
		t.Errorf("%d knowledge entries after the crash, want 0: the effect outlived its result", n)
	}
	if n := e.count(`SELECT count(*) FROM planner_tool_calls WHERE status = 'done'`); n != 0 {
		t.Errorf("%d stored tool results after the crash, want 0", n)
	}
	if rs := toolResults(e.outputs(s, turn)); len(rs) != 0 {
		t.Errorf("tool_result outputs after the crash: %+v", rs)
	}

	must(t, w.RunTurn(ctx, s, turn))
	outs := e.outputs(s, turn)
	if done := outs[len(outs)-1]; done.Type != store.OutputDone || done.Text != store.ReasonEndTurn {
		t.Fatalf("resumed turn outputs %v", types(outs))
	}
	rs := toolResults(outs)
	if len(rs) != 1 || rs[0].IsError || !strings.Contains(rs[0].Text, `"title":"first"`) {
		t.Fatalf("tool results %+v, want one good result", rs)
	}
	if n := e.count(`SELECT count(*) FROM knowledge_entries`); n != 1 {
		t.Fatalf("%d knowledge entries, want exactly 1", n)
	}
	if n := e.count(`SELECT count(*) FROM planner_tool_calls WHERE status = 'done' AND NOT is_error`); n != 1 {
		t.Fatalf("%d stored good tool results, want 1", n)
	}
}

// A binding removed while a tool call runs, after the call was authorized
// and before its write commits, refuses the write: the check holds in the
// write's own transaction.
func TestBindingRemovedDuringAToolCallRefusesItsWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, oneNote+`
  - match: 'forbidden'
    content:
      - text: "I may no longer write knowledge."
`)
	e.plannerTools()
	_, err := e.db.CreateRoleBinding(ctx, "ann@example.com", store.RoleViewer,
		store.Scope{Kind: store.ScopeOrganization, OrganizationID: e.project.OrganizationID}, store.SystemActor())
	must(t, err)
	engineer := e.human.Principal.Bindings[0].ID
	e.start()
	s := e.session()
	worker.SetToolHooks(t, s, worker.ToolHooks{BeforeCommit: func(context.Context, string) error {
		_, err := e.db.DeleteRoleBinding(ctx, engineer, store.SystemActor())
		return err
	}})
	outs := e.waitDone(s, e.send(s, "write one note").Turn)
	rs := toolResults(outs)
	if len(rs) != 1 || !rs[0].IsError || !strings.Contains(rs[0].Text, "forbidden") {
		t.Fatalf("tool results %+v, want one forbidden error", rs)
	}
	if n := e.count(`SELECT count(*) FROM knowledge_entries`); n != 0 {
		t.Fatalf("%d knowledge entries, want 0", n)
	}
}
