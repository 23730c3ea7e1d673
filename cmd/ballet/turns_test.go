package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/balletplanner/ballet/gateway/fakellm"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
	"github.com/balletplanner/ballet/tasks"
	"github.com/balletplanner/ballet/tasks/taskstest"
)

// stack is a database, a Redis namespace and a fake model shared by worker
// subprocesses; the test sends turns through the planner directly.
type stack struct {
	t       *testing.T
	env     []string
	db      *store.DB
	fake    *fakellm.Server
	planner *tasks.Planner
	human   store.Caller
	session string
	rdb     redis.UniversalClient
	names   tasks.Names
}

func newStack(t *testing.T, script string) *stack {
	t.Helper()
	ctx := context.Background()
	dbURL := storetest.URL(t)
	rdb, rc := taskstest.New(t)
	fake := fakellm.New(fakellm.MustParse(script))
	if err := fake.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fake.Close)
	db, err := store.Open(ctx, store.Config{URL: dbURL, MaxConns: 10, ConnectTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	sys := store.SystemActor()
	org, err := db.CreateOrganization(ctx, "acme", "Acme", sys)
	must(t, err)
	p, err := db.CreateProject(ctx, org.ID, "WEB", "Web", sys)
	must(t, err)
	_, err = db.CreateRoleBinding(ctx, "ann@example.com", store.RoleEngineer,
		store.Scope{Kind: store.ScopeProject, OrganizationID: org.ID, ProjectID: p.ID}, sys)
	must(t, err)
	pr, err := db.Principal(ctx, "ann@example.com")
	must(t, err)
	s := &stack{t: t, db: db, fake: fake, human: store.HumanCaller(pr), rdb: rdb, names: tasks.Names{Namespace: rc.Namespace}}
	sess, err := db.CreateSession(ctx, s.human, "WEB", "plan")
	must(t, err)
	s.session = sess.ID
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	names := tasks.Names{Namespace: rc.Namespace}
	s.planner = tasks.NewPlanner(db, tasks.NewQueue(rdb, names, time.Minute), tasks.NewPublisher(rdb, names, log),
		store.QueueLimits{Total: 10000, PerProject: 10000}, log)
	s.env = []string{"BALLET_DATABASE_URL=" + dbURL, "BALLET_REDIS_URL=" + rc.URL, "BALLET_REDIS_NAMESPACE=" + rc.Namespace,
		"BALLET_GATEWAY_URL=" + fake.URL(), "BALLET_GATEWAY_SIGNING_KEY=test-signing-key-0123456789abcdef",
		"BALLET_WORKER_LEASE=3s", "BALLET_WORKER_TASK_CHECK_INTERVAL=20ms", "BALLET_WORKER_SHUTDOWN_TIMEOUT=1s", "BALLET_SERVER_SHUTDOWN_TIMEOUT=1s",
		"BALLET_LOG_LEVEL=warn"}
	return s
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (s *stack) worker() *process {
	s.t.Helper()
	p := startProcess(s.t, s.env, "worker")
	p.waitReady(s.t)
	return p
}

func (s *stack) send(text string) string {
	s.t.Helper()
	res, err := s.planner.Send(context.Background(), s.human, s.session, text, "")
	must(s.t, err)
	return res.Turn
}

func (s *stack) outputs() []store.Output {
	s.t.Helper()
	outs, err := s.db.Outputs(context.Background(), s.session, 0, 100000)
	must(s.t, err)
	return outs
}

// waitDone waits for the turn's done output (up to 60s) and returns the
// turn's outputs.
func (s *stack) waitDone(turn string) []store.Output {
	s.t.Helper()
	var mine []store.Output
	storetest.WaitFor(s.t, "turn "+turn+"'s done output", func() bool {
		mine = mine[:0]
		for _, o := range s.outputs() {
			if o.Turn == turn {
				mine = append(mine, o)
			}
		}
		n := len(mine)
		return n > 0 && mine[n-1].Type == store.OutputDone
	})
	return mine
}

// leaseHolder is the pid of the worker holding the session's lease.
func (s *stack) leaseHolder() int {
	s.t.Helper()
	var owner *string
	storetest.WaitFor(s.t, "a worker to take the session's lease", func() bool {
		must(s.t, s.db.Pool().QueryRow(context.Background(), `SELECT lease_owner FROM planner_sessions WHERE id = $1`, s.session).Scan(&owner))
		return owner != nil
	})
	parts := strings.Split(*owner, ":")
	pid, err := strconv.Atoi(parts[len(parts)-2])
	must(s.t, err)
	return pid
}

// midTurn waits until the turn's tool ran and its second model call
// streams, then returns the worker running it and the other one.
func (s *stack) midTurn(a, b *process) (running, other *process) {
	s.t.Helper()
	storetest.WaitFor(s.t, "the turn's second model call", func() bool {
		return countTypes(s.outputs(), store.OutputToolResult) > 0 && s.fake.Active() > 0
	})
	if b.cmd.Process.Pid == s.leaseHolder() {
		return b, a
	}
	return a, b
}

func countTypes(outs []store.Output, typ string) int {
	n := 0
	for _, o := range outs {
		if o.Type == typ {
			n++
		}
	}
	return n
}

func TestConcurrentSendsRunInOrderAcrossThreeWorkers(t *testing.T) {
	t.Parallel()
	s := newStack(t, "loop: true\nanswers:\n  - latency: 10ms\n    content:\n      - text: ok\n")
	for range 3 {
		s.worker()
	}
	turns := make([]string, 50)
	errs := make(chan error, 50)
	for i := range turns {
		go func() {
			res, err := s.planner.Send(context.Background(), s.human, s.session, "message "+strconv.Itoa(i), "")
			turns[i] = res.Turn
			errs <- err
		}()
	}
	for range turns {
		must(t, <-errs)
	}
	// Arrival order is the order the turns were stored in.
	var order []string
	rows, err := s.db.Pool().Query(context.Background(), `SELECT id FROM planner_turns WHERE session_id = $1 ORDER BY position`, s.session)
	must(t, err)
	for rows.Next() {
		var id string
		must(t, rows.Scan(&id))
		order = append(order, id)
	}
	must(t, rows.Err())
	s.waitDone(order[len(order)-1])
	outs := s.outputs()
	pos := map[string]int{}
	for i, id := range order {
		pos[id] = i
	}
	current := -1
	for _, o := range outs {
		switch o.Type {
		case store.OutputStarted:
			if pos[o.Turn] != current+1 {
				t.Fatalf("turn %d started after turn %d", pos[o.Turn], current)
			}
			current = pos[o.Turn]
		case store.OutputDone, store.OutputMessage:
			if pos[o.Turn] != current {
				t.Fatalf("%s of turn %d while turn %d runs", o.Type, pos[o.Turn], current)
			}
		}
	}
	if current != 49 || countTypes(outs, store.OutputDone) != 50 {
		t.Fatalf("%d turns ran, %d done outputs", current+1, countTypes(outs, store.OutputDone))
	}
}

// resumeScript is a turn of two model calls around one tool call. The
// second call streams slowly and holds after its first two deltas until a
// file exists at release, which a test creates once it has stopped the
// worker running it: the stop lands mid-stream however slow the machine.
func resumeScript(t *testing.T) (script, release string) {
	release = filepath.Join(t.TempDir(), "release")
	return fmt.Sprintf(`
answers:
  - match: 'tool_result list_runnable'
    chunk_size: 4
    chunk_latency: 100ms
    hold_after: 2
    hold_until: %q
    content:
      - text: "Nothing is runnable yet; start with the backlog grooming."
  - match: '^what can start'
    content:
      - tool_use: {name: list_runnable, input: {}}
`, release), release
}

// A worker SIGKILLed mid-turn: another worker resumes the turn from what was
// stored, without running the tool call again, with exactly one done.
func TestKilledWorkersTurnResumesElsewhere(t *testing.T) {
	t.Parallel()
	script, release := resumeScript(t)
	s := newStack(t, script)
	a, b := s.worker(), s.worker()
	turn := s.send("what can start now?")
	victim, survivor := s.midTurn(a, b)
	killedAt := time.Now()
	must(t, victim.cmd.Process.Signal(syscall.SIGKILL))
	must(t, os.WriteFile(release, nil, 0o600))
	outs := s.waitDone(turn)
	t.Logf("resumed and finished %s after the kill", time.Since(killedAt).Round(time.Millisecond))
	if done := outs[len(outs)-1]; done.Text != "end_turn" || countTypes(outs, store.OutputDone) != 1 {
		t.Fatalf("outputs %v", outs)
	}
	if n := countTypes(outs, store.OutputToolResult); n != 1 {
		t.Fatalf("%d tool results, want 1", n)
	}
	var calls, assistants int
	must(t, s.db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM planner_tool_calls WHERE turn_id = $1`, turn).Scan(&calls))
	must(t, s.db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM planner_messages WHERE turn_id = $1 AND role = 'assistant'`, turn).Scan(&assistants))
	if calls != 1 || assistants != 2 {
		t.Fatalf("%d tool calls and %d answers stored, want 1 and 2", calls, assistants)
	}
	survivor.stop(t)
}

// SIGTERM drains: the running turn gets worker.shutdown_timeout, then is
// handed back and finished by another worker; the stopped worker exits 0.
func TestSigtermHandsTheTurnBack(t *testing.T) {
	t.Parallel()
	script, release := resumeScript(t)
	s := newStack(t, script)
	a, b := s.worker(), s.worker()
	turn := s.send("what can start now?")
	victim, survivor := s.midTurn(a, b)
	victim.stop(t) // SIGTERM and a clean exit
	must(t, os.WriteFile(release, nil, 0o600))
	outs := s.waitDone(turn)
	if done := outs[len(outs)-1]; done.Text != "end_turn" || countTypes(outs, store.OutputDone) != 1 || countTypes(outs, store.OutputToolResult) != 1 {
		t.Fatalf("outputs %v", outs)
	}
	survivor.stop(t)
}

// metric reads one sample of a process's /metrics, 0 when absent.
func (p *process) metric(t *testing.T, series string) float64 {
	t.Helper()
	res, err := http.Get("http://" + p.metrics + "/metrics")
	must(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	must(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			must(t, err)
			return f
		}
	}
	return 0
}

// A SIGKILLed worker is found dead by its stale heartbeat: its turn resumes
// on the survivor long before the (here ten-minute) lease would run out,
// completes exactly once, and the survivor says it was the heartbeat.
func TestKilledWorkerIsFoundByItsHeartbeat(t *testing.T) {
	t.Parallel()
	script, release := resumeScript(t)
	s := newStack(t, script)
	s.env = append(s.env, "BALLET_WORKER_LEASE=10m")
	a, b := s.worker(), s.worker()
	turn := s.send("what can start now?")
	victim, survivor := s.midTurn(a, b)
	must(t, victim.cmd.Process.Signal(syscall.SIGKILL))
	must(t, os.WriteFile(release, nil, 0o600))
	outs := s.waitDone(turn)
	if done := outs[len(outs)-1]; done.Text != "end_turn" || countTypes(outs, store.OutputDone) != 1 ||
		countTypes(outs, store.OutputToolResult) != 1 {
		t.Fatalf("outputs %v", outs)
	}
	lost := survivor.metric(t, `ballet_planner_resumes_total{reason="worker_lost"}`)
	expired := survivor.metric(t, `ballet_planner_resumes_total{reason="lease_expired"}`)
	if lost < 1 || expired != 0 {
		t.Fatalf("resumes: worker_lost %v, lease_expired %v; want at least 1 and 0", lost, expired)
	}
	survivor.stop(t)
}
