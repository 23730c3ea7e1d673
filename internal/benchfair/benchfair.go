// Package benchfair is the workload of `ballet bench fairness`: what fair
// scheduling (worker/dispatch) does for a quiet organization while a noisy
// one bursts, against fifo; how slots are shared by weight and under caps;
// whether queue admission keeps one organization's flood from refusing
// another's sends; and what the dispatcher costs per turn. The command
// (cmd/ballet/bench_fairness.go) gives it fresh databases, their cost
// meters and the fake model; each scenario runs its workers in-process.
package benchfair

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tasks"
	"github.com/balletplanner/ballet/tools"
	"github.com/balletplanner/ballet/worker"
	"github.com/balletplanner/ballet/worker/dispatch"
)

// Options are the flags of the bench.
type Options struct {
	Concurrency    int           // worker slots of scenarios A and B
	Latency        time.Duration // the fake model's, in scenarios A and B
	QuietEvery     time.Duration // QUIET sends one message this often
	QuietAlone     time.Duration // phase "alone"
	NoisyProjects  int           // NOISY's projects
	NoisySessions  int           // NOISY's sessions per project, one message each
	BurstB         int           // each organization's burst in scenario B
	Cap            int           // max_running_turns of the weight-3 organization (caps)
	FloodTotal     int
	FloodProject   int
	FloodOrg       int // 0: FloodTotal/2
	FloodProjects  int
	OtherSends     int
	OtherOver      time.Duration
	CostSessions   int
	CostMessages   int
	CostConcurency int
	CostRounds     int // fair and fifo alternate this many times each
	// Scenarios are the ones to run, of Scenarios (nil: all).
	Scenarios []string
}

// Scenarios are the names of the bench's scenarios, in the order they run.
var Scenarios = []string{"a", "b", "caps", "flood", "cost"}

// runs reports whether scenario name is to run.
func (o Options) runs(name string) bool {
	return len(o.Scenarios) == 0 || slices.Contains(o.Scenarios, name)
}

// Cost is what a metered run cost, as the command's meter read it.
type Cost struct {
	Turns                  int
	Took                   time.Duration
	GoCPU, PGCPU, RedisCPU time.Duration
	// PGDispatchCPU is the part of PGCPU spent by the dispatcher's own
	// connections: the one that holds its lock, reads and dispatches, and
	// its LISTEN.
	PGDispatchCPU time.Duration
	// DispatchGoCPU is the Go CPU of the dispatcher's goroutines, and
	// DispatchEnqueueCPU the part of it that enqueues tasks, which fifo
	// mode does elsewhere.
	DispatchGoCPU, DispatchEnqueueCPU time.Duration
	PGCPUOK                           bool
	Statements, RedisCmds             int64
}

// Env is a fresh, migrated database with a Redis client, opened by the
// command for one mode.
type Env struct {
	DB    *store.DB
	Redis redis.UniversalClient
	// Registry, when set, takes the worker's metrics, the dispatcher's
	// CPU counter among them.
	Registry *prometheus.Registry
	// Begin and Stop bracket the metered turns (nil: not metered).
	Begin func(ctx context.Context) error
	Stop  func(ctx context.Context, turns int) error
	// Close closes the clients, reads the meter if it ran, and drops the
	// database.
	Close func(ctx context.Context) (Cost, error)
}

// Deps are what the command provides.
type Deps struct {
	// Open makes a fresh database: fifo dispatches turns as they become
	// ready (store.DB.SetDirectDispatch); metered measures its cost.
	Open     func(ctx context.Context, fifo, metered bool) (*Env, error)
	Worker   worker.Config
	Planner  worker.PlannerConfig
	Shutdown time.Duration
	// ModelURL is the fake model answering after Options.Latency,
	// FastModelURL the one answering at once (the cost scenario).
	ModelURL, FastModelURL string
}

// rig is one mode's database, namespace, planner and worker.
type rig struct {
	env     *Env
	db      *store.DB
	names   tasks.Names
	planner *tasks.Planner
	worker  *worker.Worker
	queue   *tasks.Queue
	pub     *tasks.Publisher
	mode    string
}

// newRig opens a fresh database in mode (fair or fifo) with a worker of
// concurrency slots against modelURL; admission by lim. start: whether to
// start the worker.
func newRig(ctx context.Context, d Deps, mode string, metered bool, concurrency int, modelURL string, lim store.QueueLimits, start bool) (*rig, error) {
	fifo := mode == dispatch.ModeFIFO
	env, err := d.Open(ctx, fifo, metered)
	if err != nil {
		return nil, err
	}
	r := &rig{env: env, db: env.DB, mode: mode}
	r.names = tasks.Names{Namespace: fmt.Sprintf("benchfair-%d-", time.Now().UnixNano())}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	r.queue = tasks.NewQueue(env.Redis, r.names, time.Hour)
	r.pub = tasks.NewPublisher(env.Redis, r.names, log)
	r.planner = tasks.NewPlanner(env.DB, r.queue, r.pub, lim, log)
	if !start {
		return r, nil
	}
	reg, err := tools.Planner(log)
	if err != nil {
		r.close(ctx)
		return nil, err
	}
	wc := d.Worker
	wc.Concurrency = concurrency
	pc := d.Planner
	pc.Skill = ""
	r.worker, err = worker.New(wc, pc, d.Shutdown, worker.Deps{DB: env.DB, Redis: env.Redis, Queue: r.queue, Publisher: r.pub,
		Tools: reg, Log: log, Scheduler: dispatch.Config{Mode: mode}, Registry: env.Registry,
		Model: worker.GatewayModel{Client: llm.NewClient(modelURL, []byte("bench"), nil)}})
	if err != nil {
		r.close(ctx)
		return nil, err
	}
	if err := r.worker.Start(ctx); err != nil {
		r.worker = nil
		r.close(ctx)
		return nil, err
	}
	return r, nil
}

// close stops the worker, deletes the namespace's Redis keys and drops
// the database.
func (r *rig) close(ctx context.Context) (Cost, error) {
	if r.worker != nil {
		r.worker.Stop()
	}
	r.dropKeys(ctx)
	return r.env.Close(ctx)
}

func (r *rig) dropKeys(ctx context.Context) {
	var keys []string
	iter := r.env.Redis.Scan(ctx, 0, r.names.Namespace+"*", 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	// asynq's own keys embed the queue name in braces.
	iter = r.env.Redis.Scan(ctx, 0, "asynq:{"+r.names.Namespace+"*", 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	for _, k := range keys {
		r.env.Redis.Del(ctx, k)
	}
	r.env.Redis.SRem(ctx, "asynq:queues", r.names.Queue())
}

// tenant is an organization with its projects and one human engineer in
// all of them.
type tenant struct {
	org      store.Organization
	projects []string // keys
	caller   store.Caller
}

func (r *rig) tenant(ctx context.Context, key string, projects int) (tenant, error) {
	sys := store.SystemActor()
	org, err := r.db.CreateOrganization(ctx, key, key, sys)
	if err != nil {
		return tenant{}, err
	}
	t := tenant{org: org}
	for i := range projects {
		pk := fmt.Sprintf("P%s%d", projectPrefix(key), i+1)
		if _, err := r.db.CreateProject(ctx, org.ID, pk, pk, sys); err != nil {
			return tenant{}, err
		}
		t.projects = append(t.projects, pk)
	}
	subject := key + "@bench.example.com"
	if _, err := r.db.CreateRoleBinding(ctx, subject, store.RoleEngineer,
		store.Scope{Kind: store.ScopeOrganization, OrganizationID: org.ID}, sys); err != nil {
		return tenant{}, err
	}
	pr, err := r.db.Principal(ctx, subject)
	if err != nil {
		return tenant{}, err
	}
	t.caller = store.HumanCaller(pr)
	return t, nil
}

// projectPrefix makes a project key prefix from an organization key.
func projectPrefix(key string) string {
	out := make([]byte, 0, 4)
	for i := 0; i < len(key) && len(out) < 4; i++ {
		if c := key[i]; c >= 'a' && c <= 'z' {
			out = append(out, c-'a'+'A')
		}
	}
	return string(out)
}

// send sends one message into a new session of project.
func (r *rig) send(ctx context.Context, t tenant, project string) error {
	s, err := r.db.CreateSession(ctx, t.caller, project, "bench")
	if err != nil {
		return err
	}
	_, err = r.planner.Submit(ctx, t.caller, store.SendRequest{Session: s.ID, Text: "go"})
	return err
}
