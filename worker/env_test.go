package worker_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/balletplanner/ballet/gateway/fakellm"
	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
	"github.com/balletplanner/ballet/tasks"
	"github.com/balletplanner/ballet/tasks/taskstest"
	"github.com/balletplanner/ballet/tools"
	"github.com/balletplanner/ballet/worker"
	"github.com/balletplanner/ballet/worker/dispatch"
)

// env is a worker pool on a database and Redis namespace of the test's own,
// talking to a scripted fake model over HTTP.
type env struct {
	t       *testing.T
	db      *store.DB
	names   tasks.Names
	queue   *tasks.Queue
	planner *tasks.Planner
	fake    *fakellm.Server
	human   store.Caller
	project store.Project
	deps    worker.Deps
	// calls counts runs of the test tools by name.
	calls   sync.Map
	started chan string // the slow tool announces each run
	log     *slog.Logger
}

type envOption func(*worker.Config, *worker.PlannerConfig)

func newEnv(t *testing.T, script string, opts ...envOption) *env {
	t.Helper()
	ctx := context.Background()
	db := storetest.New(t)
	rdb, rc := taskstest.New(t)
	e := &env{t: t, db: db, names: tasks.Names{Namespace: rc.Namespace}, started: make(chan string, 100),
		log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	e.queue = tasks.NewQueue(rdb, e.names, time.Minute)
	pub := tasks.NewPublisher(rdb, e.names, e.log)
	e.planner = tasks.NewPlanner(db, e.queue, pub, store.QueueLimits{Total: 100000, PerProject: 100000}, e.log)
	e.fake = fakellm.New(fakellm.MustParse(script))
	if err := e.fake.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.fake.Close)

	sys := store.SystemActor()
	org, err := db.CreateOrganization(ctx, "acme", "Acme", sys)
	must(t, err)
	e.project, err = db.CreateProject(ctx, org.ID, "WEB", "Web", sys)
	must(t, err)
	_, err = db.CreateRoleBinding(ctx, "ann@example.com", store.RoleEngineer,
		store.Scope{Kind: store.ScopeProject, OrganizationID: org.ID, ProjectID: e.project.ID}, sys)
	must(t, err)
	p, err := db.Principal(ctx, "ann@example.com")
	must(t, err)
	e.human = store.HumanCaller(p)

	reg, err := tools.NewRegistry(e.log, e.testTools()...)
	must(t, err)
	// The turn engine's tests run the queue first come first served: a
	// sent turn's task is in the queue when the send returns. Fair
	// dispatch has tests of its own (dispatch_test.go), which call fair.
	db.SetDirectDispatch(true)
	e.deps = worker.Deps{DB: db, Redis: rdb, Queue: e.queue, Publisher: pub, Tools: reg, Log: e.log,
		Model:     worker.GatewayModel{Client: llm.NewClient(e.fake.URL(), []byte("test-key"), nil)},
		Scheduler: dispatch.Config{Mode: dispatch.ModeFIFO}}
	return e
}

// fair makes the env's turns go through the dispatcher that each worker
// it starts runs (scheduler.mode = "fair", the default), with caps; call
// it before the first send.
func (e *env) fair(caps dispatch.Config) *env {
	caps.Mode = dispatch.ModeFair
	e.db.SetDirectDispatch(false)
	e.deps.Scheduler = caps
	return e
}

// start runs a worker until the test ends.
func (e *env) start(opts ...envOption) *worker.Worker {
	e.t.Helper()
	cfg := worker.DefaultConfig()
	cfg.Concurrency = 50
	cfg.Lease = 2 * time.Second
	cfg.TaskCheckInterval = 20 * time.Millisecond
	pc := worker.DefaultPlannerConfig()
	pc.Model = "fake-model"
	for _, o := range opts {
		o(&cfg, &pc)
	}
	d := e.deps
	d.Registry = prometheus.NewRegistry()
	w, err := worker.New(cfg, pc, 2*time.Second, d)
	must(e.t, err)
	must(e.t, w.Start(context.Background()))
	e.t.Cleanup(w.Stop)
	return w
}

func (e *env) session() string {
	e.t.Helper()
	s, err := e.db.CreateSession(context.Background(), e.human, "WEB", "plan")
	must(e.t, err)
	return s.ID
}

func (e *env) send(session, text string) store.SendResult {
	e.t.Helper()
	res, err := e.planner.Send(context.Background(), e.human, session, text, "")
	must(e.t, err)
	return res
}

// waitDone waits until the turn has its done output and returns the turn's
// stored outputs.
func (e *env) waitDone(session, turn string) []store.Output {
	e.t.Helper()
	var outs []store.Output
	storetest.WaitFor(e.t, "turn "+turn+"'s done output", func() bool {
		outs = e.outputs(session, turn)
		n := len(outs)
		return n > 0 && outs[n-1].Type == store.OutputDone
	})
	return outs
}

func (e *env) outputs(session, turn string) []store.Output {
	e.t.Helper()
	all, err := e.db.Outputs(context.Background(), session, 0, 100000)
	must(e.t, err)
	var outs []store.Output
	for _, o := range all {
		if turn == "" || o.Turn == turn {
			outs = append(outs, o)
		}
	}
	return outs
}

func (e *env) calledTimes(tool string) int64 {
	v, _ := e.calls.LoadOrStore(tool, new(atomic.Int64))
	return v.(*atomic.Int64).Load()
}

// testTools are simple tools with observable effects.
func (e *env) testTools() []tools.Tool {
	count := func(name string) {
		v, _ := e.calls.LoadOrStore(name, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
	}
	obj := json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}},"additionalProperties":false}`)
	return []tools.Tool{
		{Definition: tools.Definition{Name: "lookup", Description: "Looks a thing up.", InputSchema: obj},
			Call: func(_ context.Context, _ tools.Env, in json.RawMessage) (any, error) {
				count("lookup")
				return map[string]any{"found": string(in)}, nil
			}},
		{Definition: tools.Definition{Name: "broken", Description: "Always fails.", InputSchema: obj},
			Call: func(context.Context, tools.Env, json.RawMessage) (any, error) {
				count("broken")
				return nil, store.Errorf(store.CodeNotFound, "item WEB-99 not found")
			}},
		{Definition: tools.Definition{Name: "slow", Description: "Takes its time.", InputSchema: obj},
			Call: func(ctx context.Context, env tools.Env, _ json.RawMessage) (any, error) {
				count("slow")
				e.started <- env.Session
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-time.After(20 * time.Second):
					return map[string]any{"slept": true}, nil
				}
			}},
	}
}

func types(outs []store.Output) []string {
	var s []string
	for _, o := range outs {
		s = append(s, o.Type)
	}
	return s
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
