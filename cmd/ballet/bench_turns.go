package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	goruntime "runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/internal/tracing"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tasks"
	"github.com/balletplanner/ballet/tools"
	"github.com/balletplanner/ballet/worker"
)

func init() { benchCommands["turns"] = newBenchTurnsCmd }

// turnTimes are when a turn was sent, started and done.
type turnTimes struct{ sent, started, done time.Time }

// turnBenchOptions are the flags of `ballet bench turns`.
type turnBenchOptions struct {
	config, modes      string
	sessions, messages int
	rounds             int
	latency            time.Duration
	reuseDB, keepDB    bool
	memTurns           int
	memLatency         time.Duration
	memProfile         string
	cpuProfile, script string
}

func newBenchTurnsCmd() *cobra.Command {
	var o turnBenchOptions
	c := &cobra.Command{
		Use:   "turns",
		Short: "planner turn throughput, latency and cost per turn through the queue vs. the turn loop in-process",
		Long: "Runs --sessions sessions × --messages messages through a worker against the\n" +
			"configured Postgres and Redis with the fake model (a ballet fake-llm child process)\n" +
			"at --latency: once through the queue, once calling the turn loop in-process. Each\n" +
			"session sends its next message when the previous turn is done, as a human would.\n" +
			"Each mode runs on a fresh database created (and migrated) on the configured server\n" +
			"and dropped at the end; beside turns/s it prints the CPU per turn of this process,\n" +
			"the Postgres backends and Redis (the fake model's apart, not in the total), and the\n" +
			"statements, round trips, commits, WAL bytes and Redis commands per turn.\n" +
			"--rounds runs the modes again, in alternating order after an unmeasured warm-up, for a\n" +
			"steadier queue ÷ direct ratio, printed beside the fake model's CPU ratio (how fast\n" +
			"the host ran each mode) and the ratio at equal host speed.\n" +
			"--memory-turns adds a phase that holds that many turns running at once and prints\n" +
			"the worker's memory per running turn.",
		Example: "  ballet bench turns --sessions 200 --messages 10\n" +
			"  ballet bench turns --sessions 200 --messages 10 --rounds 6\n" +
			"  ballet bench turns --mode queue --sessions 10 --messages 1 --memory-turns 1000 --memory-latency 5s",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return benchTurns(cmd.Context(), o, cmd.OutOrStdout())
		},
	}
	fs := c.Flags()
	addConfigFlag(c, &o.config)
	fs.IntVar(&o.sessions, "sessions", 100, "concurrent sessions")
	fs.IntVar(&o.messages, "messages", 5, "messages sent into each session, one after another")
	fs.IntVar(&o.rounds, "rounds", 1, "run the modes this many times, in alternating order after an unmeasured warm-up, and print the queue ÷ direct ratio of each round, its median and the pooled one")
	fs.DurationVar(&o.latency, "latency", 0, "the fake model's latency before it answers")
	fs.StringVar(&o.modes, "mode", "queue,direct", "comma-separated: queue (asynq, the product path) and direct (the loop in-process)")
	fs.BoolVar(&o.reuseDB, "reuse-database", false, "run on the configured database itself instead of a fresh one per mode")
	fs.BoolVar(&o.keepDB, "keep-database", false, "keep the fresh databases instead of dropping them at the end")
	fs.IntVar(&o.memTurns, "memory-turns", 0, "also hold this many turns running at once (queue mode) and print memory per running turn; 0 skips")
	fs.DurationVar(&o.memLatency, "memory-latency", 5*time.Second, "the fake model's latency in the --memory-turns phase")
	fs.StringVar(&o.memProfile, "mem-profile", "", "write a heap profile (PATH) and a goroutine profile (PATH.goroutines) at the peak of the --memory-turns phase")
	fs.StringVar(&o.script, "script", "", "the fake model's script instead of one text answer: \"demo\" (5 model calls and 4 tool calls a turn) or a YAML/JSON file; --latency is then unused")
	fs.StringVar(&o.cpuProfile, "cpu-profile", "", "write a CPU profile of each mode's turns to this path + \".<mode>\" (for go tool pprof)")
	return c
}

// benchTurns runs N sessions × M messages through a worker against the
// configured Postgres and Redis with the fake model at a set latency: once
// through the queue, once calling the turn loop in-process, each on a fresh
// database. Each session sends its next message when the previous turn is
// done, as a human would.
func benchTurns(ctx context.Context, o turnBenchOptions, out io.Writer) error {
	modes, err := o.validate()
	if err != nil {
		return err
	}
	cfg, err := LoadConfig(configPath(o.config), os.Environ())
	if err != nil {
		return err
	}
	cfg.Log.Level = "error"
	// The OTEL_* variables trace the bench's turns as they do a process's:
	// off unless an endpoint is set.
	tr, err := tracing.Start(ctx, "bench")
	if err != nil {
		return err
	}
	defer func() { _ = tr.Stop(5 * time.Second) }()
	fake, err := startFakeProcess(ctx, o.script, o.latency)
	if err != nil {
		return err
	}
	defer fake.close()
	model := "one text answer after " + o.latency.String()
	if o.script != "" {
		model = "script " + o.script
	}
	fmt.Fprintf(out, "bench turns: %d sessions × %d messages, fake model: %s, worker concurrency %d, GOMAXPROCS %d\n",
		o.sessions, o.messages, model, cfg.Worker.Concurrency, goruntime.GOMAXPROCS(0))
	if tr.Enabled() {
		fmt.Fprintf(out, "tracing: on, exporting spans over OTLP %s to %s\n", tr.Settings().Protocol, tr.Settings().Endpoint)
	} else {
		fmt.Fprintln(out, "tracing: off (no OTEL_EXPORTER_OTLP_ENDPOINT)")
	}
	switch {
	case o.reuseDB:
		fmt.Fprintln(out, "database: the configured one, reused by every mode (--reuse-database)")
	case o.keepDB:
		fmt.Fprintln(out, "database: a fresh one per mode (ballet_bench_<random>, migrated), kept at the end (--keep-database)")
	default:
		fmt.Fprintln(out, "database: a fresh one per mode (ballet_bench_<random>, migrated), dropped at the end")
	}
	rounds, err := runRounds(ctx, cfg, o, modes, fake, out)
	if err != nil {
		return err
	}
	if o.rounds > 1 {
		printRounds(out, rounds)
	}
	if o.memTurns > 0 {
		if err := benchTurnMemory(ctx, cfg, o, out); err != nil {
			return fmt.Errorf("bench turns (memory): %w", err)
		}
	}
	var mem goruntime.MemStats
	goruntime.ReadMemStats(&mem)
	fmt.Fprintf(out, "\nprocess memory: %.0f MiB obtained from the OS (runtime.MemStats.Sys); peak RSS %s\n", float64(mem.Sys)/(1<<20), peakRSS(os.Getpid()))
	return nil
}

// turnWorkload is one workload of runTurns.
type turnWorkload struct {
	fakeURL, mode      string
	sessions, messages int
	// begin runs once the sessions exist, before the first message; end
	// after the last turn's done, with the number of turns.
	begin func(ctx context.Context) error
	end   func(ctx context.Context, turns int) error
	// running, when set, gets the number of turns started and not done.
	running *atomic.Int64
}

// runTurnBench runs sessions × messages turns in mode, unmeasured.
func runTurnBench(ctx context.Context, rt *runtime, fakeURL, mode string, sessions, messages int) ([]turnTimes, error) {
	ts, _, err := runTurns(ctx, rt, turnWorkload{fakeURL: fakeURL, mode: mode, sessions: sessions, messages: messages})
	return ts, err
}

// runTurns sets up a fresh project and worker in a namespace of its own,
// runs the workload and collects each turn's times from the outputs; took
// is from the first message to the last turn's done.
func runTurns(ctx context.Context, rt *runtime, r turnWorkload) ([]turnTimes, time.Duration, error) {
	mode, sessions, messages := r.mode, r.sessions, r.messages
	ns := fmt.Sprintf("bench-%d-", time.Now().UnixNano())
	names := tasks.Names{Namespace: ns}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	queue := tasks.NewQueue(rt.rdb, names, time.Hour)
	pub := tasks.NewPublisher(rt.rdb, names, log)
	planner := tasks.NewPlanner(rt.db, queue, pub, store.QueueLimits{}, log)
	caller, project, err := benchTenant(ctx, rt.db, ns)
	if err != nil {
		return nil, 0, err
	}
	reg, err := tools.Planner(log)
	if err != nil {
		return nil, 0, err
	}
	pc := rt.cfg.Planner
	pc.Skill = ""
	w, err := worker.New(rt.cfg.Worker, pc, rt.cfg.Worker.ShutdownTimeout, worker.Deps{DB: rt.db, Redis: rt.rdb,
		Queue: queue, Publisher: pub, Tools: reg, Log: log,
		Model: worker.GatewayModel{Client: llm.NewClient(r.fakeURL, []byte("bench"), nil)}})
	if err != nil {
		return nil, 0, err
	}
	var mu sync.Mutex
	times := map[string]*turnTimes{}
	waiting := map[string]chan struct{}{} // queue mode: a session waits for its turn's done
	stamp := func(turn string, set func(*turnTimes)) {
		mu.Lock()
		defer mu.Unlock()
		t := times[turn]
		if t == nil {
			t = &turnTimes{}
			times[turn] = t
		}
		set(t)
	}
	sub := rt.rdb.PSubscribe(ctx, names.SessionChannel("*"))
	if _, err := sub.Receive(ctx); err != nil {
		return nil, 0, err
	}
	defer sub.Close()
	doneCh := make(chan struct{}, sessions*messages)
	go func() {
		for msg := range sub.Channel(redis.WithChannelSize(sessions * messages * 4)) {
			var o store.Output
			if json.Unmarshal([]byte(msg.Payload), &o) != nil {
				continue
			}
			now := time.Now()
			switch o.Type {
			case store.OutputStarted:
				stamp(o.Turn, func(t *turnTimes) { t.started = now })
				if r.running != nil {
					r.running.Add(1)
				}
			case store.OutputDone:
				stamp(o.Turn, func(t *turnTimes) { t.done = now })
				if r.running != nil {
					r.running.Add(-1)
				}
				mu.Lock()
				if ch := waiting[o.Turn]; ch != nil {
					close(ch)
				} else {
					waiting[o.Turn] = closedChan
				}
				mu.Unlock()
				doneCh <- struct{}{}
			}
		}
	}()
	if mode == "queue" {
		if err := w.Start(ctx); err != nil {
			return nil, 0, err
		}
		defer w.Stop()
	} else {
		// The events the turns write are numbered as a started worker's
		// numberer would, so that both modes pay for it.
		numberer := tasks.NewEventNumberer(rt.db, rt.log)
		_ = numberer.Start(ctx) // it never fails
		defer numberer.Stop()
	}
	ids, err := benchSessions(ctx, rt.db, caller, project, sessions)
	if err != nil {
		return nil, 0, err
	}
	if r.begin != nil {
		if err := r.begin(ctx); err != nil {
			return nil, 0, err
		}
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	for _, sid := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range messages {
				sent := time.Now()
				var turn string
				if mode == "queue" {
					res, err := planner.Send(ctx, caller, sid, "go", "")
					if err != nil {
						errs <- err
						return
					}
					turn = res.Turn
				} else {
					// A send without the enqueue: it stores the turn and
					// publishes its queued output, as Planner.Send does.
					res, err := rt.db.SendMessage(ctx, caller, sid, "go", "", store.QueueLimits{})
					if err != nil {
						errs <- err
						return
					}
					pub.Publish(ctx, res.Queued)
					turn = res.Turn
				}
				stamp(turn, func(t *turnTimes) { t.sent = sent })
				if mode == "direct" {
					if err := w.RunTurn(ctx, sid, turn); err != nil {
						errs <- err
						return
					}
					continue
				}
				// Like a human in a chat, send the next message after the answer.
				mu.Lock()
				ch := waiting[turn]
				if ch == nil {
					ch = make(chan struct{})
					waiting[turn] = ch
				}
				mu.Unlock()
				<-ch
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return nil, 0, err
	}
	for range sessions * messages {
		select {
		case <-doneCh:
		case <-time.After(5 * time.Minute):
			return nil, 0, fmt.Errorf("turns not done after 5 minutes")
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
	}
	took := time.Since(start)
	if r.end != nil {
		if err := r.end(ctx, sessions*messages); err != nil {
			return nil, 0, err
		}
	}
	mu.Lock()
	defer mu.Unlock()
	all := make([]turnTimes, 0, len(times))
	for _, t := range times {
		all = append(all, *t)
	}
	return all, took, nil
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func benchTenant(ctx context.Context, db *store.DB, ns string) (store.Caller, string, error) {
	sys := store.SystemActor()
	key := strings.ToUpper(fmt.Sprintf("B%X", time.Now().UnixNano()%0xFFFFFFF))
	org, err := db.CreateOrganization(ctx, strings.TrimSuffix(strings.ToLower(ns), "-"), "Bench", sys)
	if err != nil {
		return store.Caller{}, "", err
	}
	p, err := db.CreateProject(ctx, org.ID, key, "Bench", sys)
	if err != nil {
		return store.Caller{}, "", err
	}
	subject := "bench@" + ns + "example.com"
	if _, err := db.CreateRoleBinding(ctx, subject, store.RoleEngineer,
		store.Scope{Kind: store.ScopeProject, OrganizationID: org.ID, ProjectID: p.ID}, sys); err != nil {
		return store.Caller{}, "", err
	}
	pr, err := db.Principal(ctx, subject)
	if err != nil {
		return store.Caller{}, "", err
	}
	return store.HumanCaller(pr), p.Key, nil
}

func printTurnTable(out io.Writer, results map[string][]turnTimes, took map[string]time.Duration) {
	fmt.Fprintf(out, "| mode | turns | turns/s | send→started p50 | p95 | p99 | send→done p50 | p95 | p99 |\n|---|---|---|---|---|---|---|---|---|\n")
	done50 := map[string]time.Duration{}
	for _, mode := range []string{"queue", "direct"} {
		ts, ok := results[mode]
		if !ok {
			continue
		}
		var st, dn []time.Duration
		for _, t := range ts {
			st = append(st, t.started.Sub(t.sent))
			dn = append(dn, t.done.Sub(t.sent))
		}
		s, d := quantilesOf(st), quantilesOf(dn)
		done50[mode] = d.p50
		fmt.Fprintf(out, "| %s | %d | %.0f | %s ms | %s ms | %s ms | %s ms | %s ms | %s ms |\n", mode, len(ts),
			float64(len(ts))/took[mode].Seconds(), ms(s.p50), ms(s.p95), ms(s.p99), ms(d.p50), ms(d.p95), ms(d.p99))
	}
	q, okq := done50["queue"]
	d, okd := done50["direct"]
	if okq && okd {
		fmt.Fprintf(out, "\nqueue overhead at p50 (send→done): %s ms − %s ms = %s ms; ratio %.2f\n",
			ms(q), ms(d), ms(q-d), float64(q)/float64(max(d, 1)))
	}
}
