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

	"github.com/balletplanner/ballet/gateway"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tasks"
	"github.com/balletplanner/ballet/tools"
)

// Model is what a turn needs of the gateway: one streamed model call.
type Model interface {
	Call(ctx context.Context, who gateway.Principal, req gateway.MessageRequest, onText func(string)) (*gateway.MessageResponse, error)
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
	cancel   context.CancelFunc
	sub      *redis.PubSub
	wg       sync.WaitGroup
}

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
	return w, nil
}

// ID names this worker in leases and logs.
func (w *Worker) ID() string { return w.id }

// Start runs the asynq server, the cancel listener and the sweeper.
func (w *Worker) Start(ctx context.Context) error {
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
	mux.HandleFunc(tasks.TypeTurn, w.handle)
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w.cancel = cancel
	sub := w.d.Redis.Subscribe(bg, names.CancelChannel())
	if _, err := sub.Receive(bg); err != nil {
		cancel()
		return fmt.Errorf("worker: subscribe to cancels: %w", err)
	}
	w.sub = sub
	w.wg.Add(2)
	go w.listenCancels(sub)
	go w.sweep(bg)
	if err := w.srv.Start(mux); err != nil {
		cancel()
		_ = sub.Close()
		w.wg.Wait()
		return fmt.Errorf("worker: start: %w", err)
	}
	w.log.InfoContext(ctx, "worker started", slog.String("worker", w.id), slog.String("queue", names.Queue()),
		slog.Int("concurrency", w.cfg.Concurrency))
	return nil
}

// Stop drains: running turns get the shutdown timeout, then are handed back
// and resume on another worker.
func (w *Worker) Stop() {
	w.stopping.Store(true)
	if w.srv != nil {
		w.srv.Shutdown()
	}
	if w.cancel != nil {
		w.cancel()
	}
	if w.sub != nil {
		_ = w.sub.Close()
	}
	w.wg.Wait()
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
