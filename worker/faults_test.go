package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/balletplanner/ballet/internal/logtest"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
	"github.com/balletplanner/ballet/tasks"
	"github.com/balletplanner/ballet/tools"
	"github.com/balletplanner/ballet/worker"
)

// observed is a worker of the test with a registry of its own.
type observed struct {
	w   *worker.Worker
	reg *prometheus.Registry
}

// resumes reads ballet_planner_resumes_total{reason}.
func (o observed) resumes(t *testing.T, reason string) float64 {
	t.Helper()
	mfs, err := o.reg.Gather()
	must(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "ballet_planner_resumes_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// startObserved runs a worker on deps d with the test's usual settings.
func (e *env) startObserved(d worker.Deps, shutdown time.Duration) observed {
	e.t.Helper()
	cfg := worker.DefaultConfig()
	cfg.Concurrency = 10
	cfg.Lease = 2 * time.Second
	cfg.TaskCheckInterval = 20 * time.Millisecond
	pc := worker.DefaultPlannerConfig()
	pc.Model = "fake-model"
	reg := prometheus.NewRegistry()
	d.Registry = reg
	w, err := worker.New(cfg, pc, shutdown, d)
	must(e.t, err)
	must(e.t, w.Start(context.Background()))
	e.t.Cleanup(w.Stop)
	return observed{w: w, reg: reg}
}

// leaseToken is the session's lease token now.
func (e *env) leaseToken(session string) (token int64) {
	e.t.Helper()
	must(e.t, e.db.Pool().QueryRow(context.Background(), `SELECT lease_token FROM planner_sessions WHERE id = $1`,
		session).Scan(&token))
	return token
}

// leaseLive reports whether the lease with token is still live on the
// session: not handed back, not run out, not taken by another worker since.
func (e *env) leaseLive(session string, token int64) bool {
	e.t.Helper()
	var live bool
	must(e.t, e.db.Pool().QueryRow(context.Background(), `SELECT lease_token = $2 AND lease_expires_at > now()
		FROM planner_sessions WHERE id = $1`, session, token).Scan(&live))
	return live
}

func (e *env) attempts(turn string) (n int) {
	e.t.Helper()
	must(e.t, e.db.Pool().QueryRow(context.Background(), `SELECT attempts FROM planner_turns WHERE id = $1`, turn).Scan(&n))
	return n
}

// wantAnsweredInOneAttempt waits for a one-answer turn's done and fails the
// test unless it answered and ended end_turn in its first attempt; why says
// what a second attempt would mean.
func (e *env) wantAnsweredInOneAttempt(session, turn, why string) {
	e.t.Helper()
	outs := e.waitDone(session, turn)
	if got := strings.Join(types(outs), ","); got != "queued,started,message,done" || outs[len(outs)-1].Text != store.ReasonEndTurn {
		e.t.Fatalf("outputs %s (done %q), want queued,started,message,done (end_turn)", got, outs[len(outs)-1].Text)
	}
	if n := e.attempts(turn); n != 1 {
		e.t.Fatalf("%d attempts, want 1: %s", n, why)
	}
}

// A turn cut off by the drain hands its lease back before the worker's
// Postgres pool is closed, so another worker resumes it at once instead of
// after the lease, and nothing fails on a closed pool.
func TestDrainHandsTheLeaseBackBeforeThePoolCloses(t *testing.T) {
	t.Parallel()
	e := newEnv(t, `
answers:
  - match: 'tool_result stubborn'
    content:
      - text: "Done."
  - match: '.'
    content:
      - tool_use: {name: stubborn, input: {q: a}}
`)
	ctx := context.Background()
	var runs atomic.Int64
	started := make(chan struct{}, 1)
	stubborn := tools.Tool{Definition: tools.Definition{Name: "stubborn", Description: "Notices a cancel late.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}},"additionalProperties":false}`)},
		Call: func(ctx context.Context, _ tools.Env, _ json.RawMessage) (any, error) {
			if runs.Add(1) > 1 {
				return map[string]any{"ok": true}, nil // the resumed attempt's run
			}
			started <- struct{}{}
			<-ctx.Done()
			// A tool that takes its time to wind down keeps its handler
			// running past asynq's shutdown timeout.
			time.Sleep(500 * time.Millisecond)
			return nil, ctx.Err()
		}}
	reg, err := tools.NewRegistry(e.log, stubborn)
	must(t, err)

	// Worker A has a pool and a log of its own, closed like a process does.
	poolA, err := store.Open(ctx, store.Config{URL: e.db.Pool().Config().ConnString(), MaxConns: 5, ConnectTimeout: 5 * time.Second})
	must(t, err)
	var logA logtest.Buffer
	dA := e.deps
	dA.DB, dA.Tools, dA.Log = poolA, reg, slog.New(slog.NewTextHandler(&logA, nil))
	a := e.startObserved(dA, 300*time.Millisecond)

	s := e.session()
	turn := e.send(s, "go").Turn
	<-started
	tokenA := e.leaseToken(s) // the claim is committed before the tool runs
	dB := e.deps
	dB.Tools = reg
	b := e.startObserved(dB, 2*time.Second)

	a.w.Stop()
	poolA.Close()
	// Worker B may have resumed the turn already under a lease of its own.
	if e.leaseLive(s, tokenA) {
		t.Fatalf("the drained worker returned with its lease still live; worker A log:\n%s", logA.String())
	}
	outs := e.waitDone(s, turn)
	if done := outs[len(outs)-1]; done.Text != "end_turn" || strings.Count(strings.Join(types(outs), ","), "done") != 1 {
		t.Fatalf("outputs %v", types(outs))
	}
	if got := e.attempts(turn); got != 2 {
		t.Fatalf("%d attempts, want 2 (cut off, resumed)", got)
	}
	if strings.Contains(logA.String(), "closed pool") {
		t.Fatalf("worker A used its pool after Stop:\n%s", logA.String())
	}
	if lost := b.resumes(t, store.StaleWorkerLost); lost != 0 {
		t.Fatalf("the drained worker was taken for dead (%v resumes); it should have handed its lease back", lost)
	}
}

// holder is an asynq server that takes one task off the queue and holds it
// active without ever claiming its turn, like a worker that died between
// dequeue and claim before asynq noticed.
func holder(t *testing.T, e *env) <-chan string {
	t.Helper()
	got := make(chan string, 1)
	release := make(chan struct{})
	srv := asynq.NewServerFromRedisClient(e.deps.Redis, asynq.Config{
		Concurrency: 1, Queues: map[string]int{e.names.Queue(): 1}, TaskCheckInterval: 20 * time.Millisecond,
		ShutdownTimeout: time.Second, LogLevel: asynq.FatalLevel,
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc(tasks.TypeTurn, func(ctx context.Context, task *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		got <- id
		<-release
		return nil
	})
	must(t, srv.Start(mux))
	t.Cleanup(func() {
		close(release)
		srv.Shutdown()
	})
	return got
}

// A turn whose task a worker took and never claimed is resumed by the
// sweeper under a fresh task id: the held id is not taken for a resume.
func TestSweeperResumesPastATaskHeldActive(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		reason string
		// hold sets the turn up with its task held and returns the held id.
		hold func(e *env, session, turn string, got <-chan string) string
	}{
		{name: "queued turn", reason: "unclaimed", hold: func(_ *env, _, _ string, got <-chan string) string {
			return <-got // the send's own task
		}},
		{name: "resume of an expired lease", reason: store.StaleLeaseExpired, hold: func(e *env, session, turn string, got <-chan string) string {
			<-got // the send's own task, held too
			c, err := e.db.ClaimTurn(context.Background(), turn, "gone-worker", time.Second)
			must(e.t, err)
			if c.State != store.ClaimRun {
				e.t.Fatalf("claim state %v", c.State)
			}
			// The resume task of the expired token is taken and held too.
			resume := fmt.Sprintf("%s:resume:%d", turn, c.Fence.Token)
			got2 := holder(e.t, e)
			must(e.t, e.queue.Enqueue(context.Background(), session, turn, resume))
			if id := <-got2; id != resume {
				e.t.Fatalf("second holder took %q, want %q", id, resume)
			}
			return resume
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, "loop: true\nanswers:\n  - content:\n      - text: ok\n")
			got := holder(t, e)
			s := e.session()
			turn := e.send(s, "hello").Turn
			held := tc.hold(e, s, turn, got)
			if info, err := e.queue.Inspector().GetTaskInfo(e.names.Queue(), held); err != nil || info.State != asynq.TaskStateActive {
				t.Fatalf("task %s: %+v, %v; want it held active", held, info, err)
			}
			w := e.startObserved(e.deps, 2*time.Second)
			outs := e.waitDone(s, turn)
			if done := outs[len(outs)-1]; done.Text != "end_turn" || strings.Count(strings.Join(types(outs), ","), "done") != 1 {
				t.Fatalf("outputs %v", types(outs))
			}
			// More than one is possible on a slow machine (a sweep can see
			// the fresh task active before its claim commits) and harmless.
			if n := w.resumes(t, tc.reason); n < 1 {
				t.Fatalf("%v resumes with reason %s, want at least 1", n, tc.reason)
			}
		})
	}
}

// A turn leased by a worker whose heartbeat expired resumes long before its
// lease runs out, and the sweeper says it was the heartbeat.
func TestTurnOfASilentWorkerResumesBeforeItsLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "loop: true\nanswers:\n  - content:\n      - text: ok\n")
	ctx := context.Background()
	s := e.session()
	turn := e.send(s, "hello").Turn
	must(t, e.queue.Delete(turn))
	must(t, e.db.Beat(ctx, "silent-worker", time.Second))
	c, err := e.db.ClaimTurn(ctx, turn, "silent-worker", time.Hour)
	must(t, err)
	if c.State != store.ClaimRun {
		t.Fatalf("claim state %v", c.State)
	}
	w := e.startObserved(e.deps, 2*time.Second)
	outs := e.waitDone(s, turn)
	if done := outs[len(outs)-1]; done.Text != "end_turn" || strings.Count(strings.Join(types(outs), ","), "done") != 1 {
		t.Fatalf("outputs %v", types(outs))
	}
	if lost, expired := w.resumes(t, store.StaleWorkerLost), w.resumes(t, store.StaleLeaseExpired); lost < 1 || expired != 0 {
		t.Fatalf("resumes: worker_lost %v, lease_expired %v; want at least 1 and 0", lost, expired)
	}
	if got := e.attempts(turn); got != 2 {
		t.Fatalf("%d attempts, want 2", got)
	}
}

func TestHeartbeatSettingsAreChecked(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		interval time.Duration
		timeout  time.Duration
		want     string
	}{
		{"interval too short", time.Millisecond, time.Second, "worker.heartbeat_interval: must be at least 10ms"},
		{"timeout under two beats", time.Second, 1500 * time.Millisecond, "worker.heartbeat_timeout: must be at least twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := worker.DefaultConfig()
			c.HeartbeatInterval, c.HeartbeatTimeout = tc.interval, tc.timeout
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
	if err := worker.DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestModelRetrySettingsAreChecked(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		retries int
		wait    time.Duration
		want    string
	}{
		{"negative retries", -1, time.Second, "worker.model_retries: must be 0-20, got -1"},
		{"too many retries", 21, time.Second, "worker.model_retries: must be 0-20, got 21"},
		{"no wait", 4, 0, "worker.model_retry_wait: must be 1ms-30s, got 0s"},
		{"wait too long", 4, time.Minute, "worker.model_retry_wait: must be 1ms-30s, got 1m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := worker.DefaultConfig()
			c.ModelRetries, c.ModelRetryWait = tc.retries, tc.wait
			if err := c.Validate(); err == nil || err.Error() != tc.want {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// After Redis lost its data, asynq knows none of the worker's queues until
// one is enqueued to; the worker registers them again, so the inspector
// (and the dashboard) finds them without a restart.
func TestAWorkerRegistersItsQueuesAgainAfterRedisLostThem(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "loop: true\nanswers:\n  - content:\n      - text: ok\n")
	e.start()
	ctx := context.Background()
	rdb := e.deps.Redis
	storetest.WaitFor(t, "the planner queue registered", func() bool {
		_, err := e.queue.Inspector().GetQueueInfo(e.names.Queue())
		return err == nil
	})
	must(t, rdb.SRem(ctx, "asynq:queues", e.names.Queue(), e.names.EmbedQueue(), e.names.RetentionQueue()).Err())
	if info, err := e.queue.QueueInfo(e.names.Queue()); err != nil || info.Size != 0 {
		t.Fatalf("an unknown queue: %+v, %v; want an empty one", info, err)
	}
	for _, q := range []string{e.names.Queue(), e.names.EmbedQueue(), e.names.RetentionQueue()} {
		storetest.WaitFor(t, "queue "+q+" registered again", func() bool {
			ok, err := rdb.SIsMember(ctx, "asynq:queues", q).Result()
			return err == nil && ok
		})
	}
}
