package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tasks"
	"github.com/balletplanner/ballet/tools"
)

// Model is what a turn needs of the gateway: one streamed model call.
type Model interface {
	Call(ctx context.Context, who llm.Principal, req llm.MessageRequest, onText func(string)) (*llm.MessageResponse, error)
}

// Toolbox is what a turn needs of the tools.
type Toolbox interface {
	Definitions() []tools.Definition
	Call(ctx context.Context, env tools.Env, name string, input json.RawMessage) tools.Result
}

// Deps are what a worker needs from its process.
type Deps struct {
	DB        *store.DB
	Redis     redis.UniversalClient
	Queue     *tasks.Queue
	Publisher *tasks.Publisher
	Model     Model
	Tools     Toolbox
	Registry  prometheus.Registerer
	Log       *slog.Logger
}

// Worker is the asynq server that runs planner turns, with the sweeper that
// resumes turns of crashed workers and the listener for cancel nudges.
type Worker struct {
	cfg      Config
	planner  PlannerConfig
	shutdown time.Duration
	d        Deps
	log      *slog.Logger
	id       string
	metrics  *metrics
	srv      *asynq.Server
	planners *tasks.Planner
	prompts  promptCache

	stopping atomic.Bool
	mu       sync.Mutex
	running  map[string]*runningTurn
	handlers inflight
	beat     *heartbeat
	sweeper  *sweeper
	cancel   context.CancelFunc
	sub      *redis.PubSub
	wg       sync.WaitGroup
}

// handBackTimeout bounds how long Stop waits, once asynq's shutdown timeout
// has cut the running turns off, for their handlers to hand their leases
// back and return; nothing they use is closed before.
const handBackTimeout = 5 * time.Second

// New builds a worker; shutdown is how long running turns get on Stop.
func New(cfg Config, planner PlannerConfig, shutdown time.Duration, d Deps) (*Worker, error) {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	m, err := newMetrics(d.Registry, d.Queue)
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	w := &Worker{cfg: cfg, planner: planner, shutdown: shutdown, d: d, log: d.Log, metrics: m,
		id:      fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(suffix)),
		running: map[string]*runningTurn{}}
	w.planners = tasks.NewPlanner(d.DB, d.Queue, d.Publisher, store.QueueLimits{}, d.Log)
	w.beat = newHeartbeat(d.DB, w.id, cfg.HeartbeatInterval, cfg.HeartbeatTimeout, d.Log, w.leaseLost)
	w.sweeper = newSweeper(d.DB, d.Queue, cfg.HeartbeatInterval/2, max(time.Minute, cfg.Lease), d.Log, m)
	return w, nil
}

// ID names this worker in leases and logs.
func (w *Worker) ID() string { return w.id }

// Start runs the heartbeat, the asynq server, the cancel listener and the
// sweeper.
func (w *Worker) Start(ctx context.Context) error {
	if err := w.beat.start(ctx); err != nil {
		return err
	}
	names := w.d.Queue.Names()
	w.srv = asynq.NewServerFromRedisClient(w.d.Redis, asynq.Config{
		Concurrency:              w.cfg.Concurrency,
		Queues:                   map[string]int{names.Queue(): 1},
		TaskCheckInterval:        w.cfg.TaskCheckInterval,
		DelayedTaskCheckInterval: time.Second,
		ShutdownTimeout:          w.shutdown,
		RetryDelayFunc:           retryDelay,
		IsFailure:                func(err error) bool { return !errors.Is(err, errLater) },
		Logger:                   asynqLogger{w.log},
		LogLevel:                 asynq.WarnLevel,
	})
	mux := asynq.NewServeMux()
	mux.Use(w.handlers.middleware)
	mux.HandleFunc(tasks.TypeTurn, w.handle)
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w.cancel = cancel
	sub := w.d.Redis.Subscribe(bg, names.CancelChannel())
	if _, err := sub.Receive(bg); err != nil {
		cancel()
		w.beat.shutdown(bg)
		return fmt.Errorf("worker: subscribe to cancels: %w", err)
	}
	w.sub = sub
	w.wg.Add(1)
	go w.listenCancels(sub)
	w.sweeper.start(bg)
	if err := w.srv.Start(mux); err != nil {
		w.sweeper.shutdown()
		cancel()
		_ = sub.Close()
		w.wg.Wait()
		w.beat.shutdown(context.WithoutCancel(ctx))
		return fmt.Errorf("worker: start: %w", err)
	}
	w.log.InfoContext(ctx, "worker started", slog.String("worker", w.id), slog.String("queue", names.Queue()),
		slog.Int("concurrency", w.cfg.Concurrency))
	return nil
}

// Stop drains: running turns get the shutdown timeout, then are cut off,
// hand their leases back and resume on another worker at once. Stop returns
// only when its handlers have returned (or handBackTimeout passed), so the
// caller may close what they use; a lease still held then is freed by
// expiring this worker's heartbeat.
func (w *Worker) Stop() {
	w.stopping.Store(true)
	if w.srv != nil {
		// asynq requeues the tasks it cuts off and returns without waiting
		// for their handlers.
		w.srv.Shutdown()
	}
	if !w.handlers.wait(handBackTimeout) {
		w.log.Warn("turns still running after the drain; their leases are freed by expiring the worker's heartbeat",
			slog.String("worker", w.id), slog.Int("running", w.handlers.count()))
	}
	w.sweeper.shutdown()
	if w.cancel != nil {
		w.cancel()
	}
	if w.sub != nil {
		_ = w.sub.Close()
	}
	w.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w.beat.shutdown(ctx)
}

// leaseLost stops every running turn: this worker could not beat for so
// long that another may take its turns over.
func (w *Worker) leaseLost() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, rt := range w.running {
		rt.cancel(errLeaseLost)
	}
}

// errLater asks asynq to try the task again soon; it is not a failure.
var errLater = errors.New("worker: turn not runnable yet")

func retryDelay(n int, err error, _ *asynq.Task) time.Duration {
	if errors.Is(err, errLater) {
		return min(time.Duration(n+1)*time.Second, 10*time.Second)
	}
	return min(time.Duration(1<<min(n, 5))*time.Second, 30*time.Second)
}

// listenCancels cancels running turns named on the cancel channel.
func (w *Worker) listenCancels(sub *redis.PubSub) {
	defer w.wg.Done()
	for msg := range sub.Channel() {
		w.mu.Lock()
		rt := w.running[msg.Payload]
		w.mu.Unlock()
		if rt != nil {
			rt.cancel(errCancelled)
		}
	}
}

// runningTurn is a turn this worker runs, and how to stop it.
type runningTurn struct{ cancel context.CancelCauseFunc }

func (w *Worker) track(turn string, cancel context.CancelCauseFunc) func() {
	rt := &runningTurn{cancel: cancel}
	w.mu.Lock()
	w.running[turn] = rt
	w.mu.Unlock()
	w.metrics.running.Inc()
	return func() {
		w.mu.Lock()
		if w.running[turn] == rt { // a resumed attempt may have replaced it
			delete(w.running, turn)
		}
		w.mu.Unlock()
		w.metrics.running.Dec()
	}
}

// asynqLogger sends asynq's own logs to slog.
type asynqLogger struct{ l *slog.Logger }

func (a asynqLogger) Debug(args ...any) {
	a.l.Debug(fmt.Sprint(args...), slog.String("component", "asynq"))
}
func (a asynqLogger) Info(args ...any) {
	a.l.Info(fmt.Sprint(args...), slog.String("component", "asynq"))
}
func (a asynqLogger) Warn(args ...any) {
	a.l.Warn(fmt.Sprint(args...), slog.String("component", "asynq"))
}
func (a asynqLogger) Error(args ...any) {
	a.l.Error(fmt.Sprint(args...), slog.String("component", "asynq"))
}
func (a asynqLogger) Fatal(args ...any) {
	a.l.Error(fmt.Sprint(args...), slog.String("component", "asynq"))
}

// inflight counts the handlers running, so that Stop can wait for them after
// asynq's Shutdown has returned without doing so.
type inflight struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0, while someone waits
}

func (f *inflight) middleware(next asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		f.mu.Lock()
		f.n++
		f.mu.Unlock()
		defer f.done()
		return next.ProcessTask(ctx, t)
	})
}

func (f *inflight) done() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n--
	if f.n == 0 && f.idle != nil {
		close(f.idle)
		f.idle = nil
	}
}

func (f *inflight) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

// wait reports whether every handler returned within timeout.
func (f *inflight) wait(timeout time.Duration) bool {
	f.mu.Lock()
	if f.n == 0 {
		f.mu.Unlock()
		return true
	}
	if f.idle == nil {
		f.idle = make(chan struct{})
	}
	idle := f.idle
	f.mu.Unlock()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-idle:
		return true
	case <-t.C:
		return false
	}
}
