package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/balletplanner/ballet/internal/benchfair"
	"github.com/balletplanner/ballet/worker/dispatch"
)

func init() { benchCommands["fairness"] = newBenchFairnessCmd }

func newBenchFairnessCmd() *cobra.Command {
	var config string
	o := benchfair.Options{}
	c := &cobra.Command{
		Use:   "fairness",
		Short: "fair scheduling: a quiet organization's wait during another's burst (fair vs fifo), shares by weight, caps, admission, the dispatcher's cost",
		Long: "Runs, each on a fresh database (created, migrated, dropped) with a Redis namespace of its own\n" +
			"and workers in-process against the fake model (a ballet fake-llm child process):\n" +
			"A. QUIET sends a message every --quiet-every, alone for --quiet-alone, then while NOISY bursts\n" +
			"   --noisy-projects × --noisy-sessions turns at once, until the burst drains; in fair and fifo mode;\n" +
			"B. two organizations of weights 1 and 3 burst --burst-b turns each; then again with\n" +
			"   max_running_turns = --cap on the weight-3 one;\n" +
			"the flood: FLOOD's --flood-projects projects send until refused, then OTHER sends --other-sends;\n" +
			"the cost: --cost-sessions × --cost-messages turns at latency 0, --cost-rounds times in each mode,\n" +
			"   fair and fifo in turn; the figures are medians over the rounds.\n" +
			"--scenarios runs some of them (a, b, caps, flood, cost).",
		Example: "  ballet bench fairness\n  ballet bench fairness --scenarios cost --cost-rounds 5\n  ballet bench fairness --latency 200ms --noisy-sessions 20 --quiet-alone 3s",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return usageError{"bench fairness: " + err.Error()}
			}
			return benchFairness(cmd.Context(), config, o, cmd)
		},
	}
	fs := c.Flags()
	addConfigFlag(c, &config)
	fs.IntVar(&o.Concurrency, "concurrency", 10, "worker slots (scenarios A and B)")
	fs.DurationVar(&o.Latency, "latency", 2*time.Second, "the fake model's latency (scenarios A and B)")
	fs.DurationVar(&o.QuietEvery, "quiet-every", 500*time.Millisecond, "QUIET sends one message this often")
	fs.DurationVar(&o.QuietAlone, "quiet-alone", 20*time.Second, "QUIET alone before NOISY's burst")
	fs.IntVar(&o.NoisyProjects, "noisy-projects", 5, "NOISY's projects")
	fs.IntVar(&o.NoisySessions, "noisy-sessions", 100, "NOISY's sessions per project, one message each")
	fs.IntVar(&o.BurstB, "burst-b", 300, "each organization's burst in scenario B")
	fs.IntVar(&o.Cap, "cap", 3, "max_running_turns of the weight-3 organization in the caps run")
	fs.IntVar(&o.FloodTotal, "flood-total", 1000, "server.max_queued_turns of the flood")
	fs.IntVar(&o.FloodProject, "flood-per-project", 100, "server.max_queued_turns_per_project of the flood")
	fs.IntVar(&o.FloodOrg, "flood-per-organization", 0, "server.max_queued_turns_per_organization of the flood (0: --flood-total / 2)")
	fs.IntVar(&o.FloodProjects, "flood-projects", 11, "FLOOD's projects")
	fs.IntVar(&o.OtherSends, "other-sends", 56, "OTHER's sends after the flood")
	fs.DurationVar(&o.OtherOver, "other-over", 5*time.Second, "the time OTHER's sends are spread over")
	fs.IntVar(&o.CostSessions, "cost-sessions", 200, "sessions of the cost scenario")
	fs.IntVar(&o.CostMessages, "cost-messages", 10, "messages per session of the cost scenario, one after another")
	fs.IntVar(&o.CostConcurency, "cost-concurrency", 500, "worker slots of the cost scenario")
	fs.IntVar(&o.CostRounds, "cost-rounds", 3, "rounds of the cost scenario in each mode, fair and fifo in turn")
	fs.StringSliceVar(&o.Scenarios, "scenarios", nil, "the scenarios to run, of "+strings.Join(benchfair.Scenarios, ",")+" (default all)")
	return c
}

func benchFairness(ctx context.Context, config string, o benchfair.Options, cmd *cobra.Command) error {
	cfg, err := LoadConfig(configPath(config), os.Environ())
	if err != nil {
		return err
	}
	cfg.Log.Level = "error"
	slow, err := startFakeProcess(ctx, "", o.Latency)
	if err != nil {
		return err
	}
	defer slow.close()
	fast, err := startFakeProcess(ctx, "", 0)
	if err != nil {
		return err
	}
	defer fast.close()
	d := benchfair.Deps{Worker: cfg.Worker, Planner: cfg.Planner, Shutdown: cfg.Worker.ShutdownTimeout,
		ModelURL: slow.url, FastModelURL: fast.url,
		Open: func(ctx context.Context, fifo, metered bool) (*benchfair.Env, error) {
			return openFairnessEnv(ctx, cfg, fifo, metered, fast)
		}}
	return benchfair.Run(ctx, d, o, cmd.OutOrStdout())
}

// openFairnessEnv makes a fresh database in fifo or fair mode, with the
// meter of bench turns (bench_cost.go) when metered.
func openFairnessEnv(ctx context.Context, cfg Config, fifo, metered bool, model *fakeProcess) (*benchfair.Env, error) {
	bd, err := openBenchDatabase(ctx, cfg.Database, false)
	if err != nil {
		return nil, err
	}
	counter := &pgCounter{}
	mc := cfg
	mc.Database.URL, mc.Database.Tracer, mc.Database.Migrate = bd.url, counter, false
	mc.Database.DirectDispatch = fifo
	mc.Scheduler.Mode = dispatch.ModeFair
	if fifo {
		mc.Scheduler.Mode = dispatch.ModeFIFO
	}
	rt, err := setup(ctx, mc, "bench")
	if err != nil {
		bd.close(ctx, false)
		return nil, err
	}
	meter := &costMeter{bd: bd, rdb: rt.rdb, pool: rt.db.Pool(), counter: counter, model: model, reg: rt.reg}
	began := false
	env := &benchfair.Env{DB: rt.db, Redis: rt.rdb, Registry: rt.reg}
	if metered {
		env.Begin = func(ctx context.Context) error { began = true; return meter.begin(ctx) }
		env.Stop = meter.stop
	}
	env.Close = func(ctx context.Context) (benchfair.Cost, error) {
		rt.close()
		defer bd.close(ctx, false)
		if !began {
			return benchfair.Cost{}, nil
		}
		c, err := meter.finish(ctx)
		if err != nil {
			return benchfair.Cost{}, fmt.Errorf("bench fairness: %w", err)
		}
		var cmds int64
		for _, v := range c.redisCmds {
			cmds += v
		}
		stmts := c.driver.statements
		if c.pgssCalls >= 0 {
			stmts = c.pgssCalls
		}
		return benchfair.Cost{Turns: c.turns, Took: c.took, GoCPU: c.goCPU, PGCPU: c.pgCPU, PGDispatchCPU: c.pgDispatch, DispatchGoCPU: c.dispatchGo, DispatchEnqueueCPU: c.dispatchEnqueue, PGCPUOK: c.pgCPUOK,
			RedisCPU: c.redisCPU, Statements: stmts, RedisCmds: cmds}, nil
	}
	return env, nil
}
