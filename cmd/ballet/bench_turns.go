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
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/balletplanner/ballet/gateway/fakellm"
	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tasks"
	"github.com/balletplanner/ballet/tools"
	"github.com/balletplanner/ballet/worker"
)

func init() { benchCommands["turns"] = benchTurns }

// turnTimes are when a turn was sent, started and done.
type turnTimes struct{ sent, started, done time.Time }

// benchTurns runs N sessions × M messages through a worker against the
// configured Postgres and Redis with the fake model at a set latency: once
// through the queue, once calling the turn loop in-process. Each session
// sends its next message when the previous turn is done, as a human would.
func benchTurns(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlags("bench turns", "bench turns [--config FILE] [--sessions N] [--messages M] [--latency D] [--mode queue,direct]")
	path := fs.String("config", "", "TOML configuration file (default $BALLET_CONFIG)")
	sessions := fs.Int("sessions", 100, "concurrent sessions")
	messages := fs.Int("messages", 5, "messages sent into each session, one after another")
	latency := fs.Duration("latency", 0, "the fake model's latency before it answers")
	modes := fs.String("mode", "queue,direct", "comma-separated: queue (asynq, the product path) and direct (the loop in-process)")
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg, err := LoadConfig(configPath(*path), os.Environ())
	if err != nil {
		return err
	}
	cfg.Log.Level = "error"
	rt, err := setup(ctx, cfg, "bench")
	if err != nil {
		return err
	}
	defer rt.close()
	script := fmt.Sprintf("loop: true\nanswers:\n  - latency: %s\n    content:\n      - text: ok\n", *latency)
	fake := fakellm.New(fakellm.MustParse(script))
	if err := fake.Start(); err != nil {
		return err
	}
	defer fake.Close()
	fmt.Fprintf(out, "bench turns: %d sessions × %d messages, model latency %s, worker concurrency %d, GOMAXPROCS %d\n\n",
		*sessions, *messages, *latency, cfg.Worker.Concurrency, goruntime.GOMAXPROCS(0))
	results := map[string][]turnTimes{}
	took := map[string]time.Duration{}
	for _, mode := range strings.Split(*modes, ",") {
		if mode != "queue" && mode != "direct" {
			return usageError{fmt.Sprintf("bench turns: unknown mode %q", mode)}
		}
		start := time.Now()
		results[mode], err = runTurnBench(ctx, rt, fake.URL(), mode, *sessions, *messages)
		if err != nil {
			return fmt.Errorf("bench turns (%s): %w", mode, err)
		}
		took[mode] = time.Since(start)
	}
	printTurnTable(out, results, took)
	var mem goruntime.MemStats
	goruntime.ReadMemStats(&mem)
	fmt.Fprintf(out, "\nprocess memory: %.0f MiB obtained from the OS (runtime.MemStats.Sys); peak RSS %s\n", float64(mem.Sys)/(1<<20), peakRSS())
	return nil
}

// runTurnBench sets up a fresh project and worker in a namespace of its own,
// runs the workload and collects each turn's times from the outputs.
func runTurnBench(ctx context.Context, rt *runtime, fakeURL, mode string, sessions, messages int) ([]turnTimes, error) {
	ns := fmt.Sprintf("bench-%d-", time.Now().UnixNano())
	names := tasks.Names{Namespace: ns}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	queue := tasks.NewQueue(rt.rdb, names, time.Hour)
	pub := tasks.NewPublisher(rt.rdb, names, log)
	planner := tasks.NewPlanner(rt.db, queue, pub, store.QueueLimits{}, log)
	caller, project, err := benchTenant(ctx, rt.db, ns)
	if err != nil {
		return nil, err
	}
	reg, err := tools.Planner(log)
	if err != nil {
		return nil, err
	}
	pc := rt.cfg.Planner
	pc.Skill = ""
	w, err := worker.New(rt.cfg.Worker, pc, rt.cfg.Worker.ShutdownTimeout, worker.Deps{DB: rt.db, Redis: rt.rdb,
		Queue: queue, Publisher: pub, Tools: reg, Log: log,
		Model: worker.GatewayModel{Client: llm.NewClient(fakeURL, []byte("bench"), nil)}})
	if err != nil {
		return nil, err
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
		return nil, err
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
			case store.OutputDone:
				stamp(o.Turn, func(t *turnTimes) { t.done = now })
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
			return nil, err
		}
		defer w.Stop()
	}
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	for range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := rt.db.CreateSession(ctx, caller, project, "bench")
			if err != nil {
				errs <- err
				return
			}
			for range messages {
				sent := time.Now()
				var turn string
				if mode == "queue" {
					res, err := planner.Send(ctx, caller, s.ID, "go", "")
					if err != nil {
						errs <- err
						return
					}
					turn = res.Turn
				} else {
					res, err := rt.db.SendMessage(ctx, caller, s.ID, "go", "", store.QueueLimits{})
					if err != nil {
						errs <- err
						return
					}
					turn = res.Turn
				}
				stamp(turn, func(t *turnTimes) { t.sent = sent })
				if mode == "direct" {
					if err := w.RunTurn(ctx, s.ID, turn); err != nil {
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
		return nil, err
	}
	for range sessions * messages {
		select {
		case <-doneCh:
		case <-time.After(5 * time.Minute):
			return nil, fmt.Errorf("turns not done after 5 minutes")
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	mu.Lock()
	defer mu.Unlock()
	all := make([]turnTimes, 0, len(times))
	for _, t := range times {
		all = append(all, *t)
	}
	return all, nil
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

// peakRSS reads VmHWM from /proc, where there is one.
func peakRSS() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			return strings.TrimSpace(strings.TrimPrefix(line, "VmHWM:"))
		}
	}
	return "unknown"
}
