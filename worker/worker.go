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
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/internal/asynqlog"
	"github.com/balletplanner/ballet/internal/startstop"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tasks"
	"github.com/balletplanner/ballet/tools"
	"github.com/balletplanner/ballet/worker/dispatch"
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
	// DB is the store. The worker's own code reaches it only through the
	// small interfaces declared where they are used (turnStore,
	// transcriptStore, toolCallStore, principalStore, cancelStore,
	// promptStore, beatStore, sweepStore); the
	// tools get it whole, in their tools.Env, and so does the planner that
	// enqueues a session's next turn.
	DB        *store.DB
	Redis     redis.UniversalClient
	Queue     *tasks.Queue
	Publisher *tasks.Publisher
	Model     Model
	Tools     Toolbox
	Registry  prometheus.Registerer
	Log       *slog.Logger
	// Embedders gives the embedder metered to a scope, for the tools'
	// search (nil: no vector leg).
	Embedders store.Embedders
	// Scheduler is the [scheduler] section: in fair mode (the zero value
	// too) the worker runs a dispatcher candidate (worker/dispatch).
	Scheduler dispatch.Config
}

// Worker is the asynq server that runs planner turns, with its background
// goroutines, one file each: the heartbeat (heartbeat.go), the sweeper that
// resumes turns of crashed workers (sweeper.go), the listener for cancel
// nudges (cancel.go), and an event numberer (tasks.EventNumberer), so
// that the planner's events are numbered wherever workers run. The
// embeddings pipeline (package embeddings) and retention (package
// retention) run beside it, each a service of its own. A turn's life: handle.go runs a task through claim
// and lease (claim.go), the loop (loop.go) with its model calls (model.go),
// tool calls (toolcalls.go) and compaction (compact.go), to its finish;
// drain.go is what Stop does to the turns still running.
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

	// The store, as each concern of a turn uses it.
	turns      turnStore
	transcript transcriptStore
	toolCalls  toolCallStore
	principals principalStore
	flags      cancelStore
	promptDB   promptStore
	// toolDB is what the tools get in their tools.Env.
	toolDB tools.Store

	stopping atomic.Bool
	running  *runningTurns
	handlers inflight
	beat     *heartbeat
	sweeper  *sweeper
	cancels  *cancelListener
	numberer *tasks.EventNumberer
	// dispatcher is this process's candidate for dispatching turns; nil
	// in fifo mode.
	dispatcher *dispatch.Dispatcher

	// services are the above in their start order; Stop stops them in
	// reverse, which is the drain's order (drain.go).
	services *startstop.Group
}

// New builds a worker; shutdown is how long running turns get on Stop.
func New(cfg Config, planner PlannerConfig, shutdown time.Duration, d Deps) (*Worker, error) {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	m, err := newMetrics(d.Registry, d.Queue, cfg.TurnTimeout)
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	w := &Worker{cfg: cfg, planner: planner, shutdown: shutdown, d: d, log: d.Log, metrics: m,
		id:      fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(suffix)),
		running: newRunningTurns(),
		turns:   d.DB, transcript: d.DB, toolCalls: d.DB, principals: d.DB, flags: d.DB, promptDB: d.DB, toolDB: d.DB}
	// The worker never sends: it only enqueues a session's next turn.
	w.planners = tasks.NewPlanner(d.DB, d.Queue, d.Publisher, tasks.NoQueueLimits, d.Log)
	// Its slots are the dispatcher's capacity; without a dispatcher
	// (fifo) it offers none.
	slots := 0
	if d.Scheduler.Fair() {
		slots = cfg.Concurrency
	}
	w.beat = newHeartbeat(d.DB.NewBeater(), w.id, slots, cfg.HeartbeatInterval, cfg.HeartbeatTimeout, d.Log, w.leaseLost)
	w.sweeper = newSweeper(d.DB, d.Queue, cfg.HeartbeatInterval/2, max(time.Minute, cfg.Lease), d.Log, m)
	w.cancels = newCancelListener(d.Redis, d.Queue.Names().CancelChannel(), w.running)
	w.numberer = tasks.NewEventNumberer(d.DB, d.Log)
	if d.Scheduler.Fair() {
		dm, err := dispatch.NewMetrics(d.Registry)
		if err != nil {
			return nil, err
		}
		w.dispatcher = dispatch.New(d.DB, d.Queue, d.Scheduler, dm, d.Log)
	}
	w.services = w.lifecycle()
	return w, nil
}

// lifecycle orders the worker's services so that stopping them in reverse
// drains (drain.go): the dispatcher candidate first, so that a standby
// takes the lead while this drains; the turns, which get
// the shutdown timeout and hand their leases back; then what the turns
// used: the sweeper, the numberer, the cancel listener, and the heartbeat
// last, expiring this worker's beat.
func (w *Worker) lifecycle() *startstop.Group {
	services := []startstop.Service{
		startstop.Named("heartbeat", w.beat),
		startstop.Named("cancel listener", w.cancels),
		startstop.Named("event numberer", w.numberer),
		startstop.Named("sweeper", w.sweeper),
		&startstop.Func{Label: "turn server", Up: w.startTurns, Down: w.drainTurns},
	}
	if w.dispatcher != nil {
		services = append(services, startstop.Named("dispatcher", w.dispatcher))
	}
	return startstop.NewGroup(services...)
}

// ID names this worker in leases and logs.
func (w *Worker) ID() string { return w.id }

// Start runs the heartbeat, the cancel listener, the event numberer, the
// sweeper, the asynq server and, in fair mode, the
// dispatcher candidate; a failed start stops those started, in reverse.
func (w *Worker) Start(ctx context.Context) error {
	if err := w.services.Start(ctx); err != nil {
		return err
	}
	w.log.InfoContext(ctx, "worker started", slog.String("worker", w.id), slog.String("queue", w.d.Queue.Names().Queue()),
		slog.Int("concurrency", w.cfg.Concurrency))
	return nil
}

// startTurns runs the asynq server of the planner queue.
func (w *Worker) startTurns(context.Context) error {
	w.srv = asynq.NewServerFromRedisClient(w.d.Redis, asynq.Config{
		Concurrency:              w.cfg.Concurrency,
		Queues:                   map[string]int{w.d.Queue.Names().Queue(): 1},
		TaskCheckInterval:        w.cfg.TaskCheckInterval,
		DelayedTaskCheckInterval: time.Second,
		ShutdownTimeout:          w.shutdown,
		RetryDelayFunc:           retryDelay,
		IsFailure:                func(err error) bool { return !errors.Is(err, errLater) },
		Logger:                   asynqlog.Logger{L: w.log},
		LogLevel:                 asynq.WarnLevel,
	})
	mux := asynq.NewServeMux()
	mux.Use(w.handlers.middleware)
	mux.HandleFunc(tasks.TypeTurn, w.handle)
	if err := w.srv.Start(mux); err != nil {
		return fmt.Errorf("worker: start the planner queue: %w", err)
	}
	return nil
}

// errLater asks asynq to try the task again soon; it is not a failure.
var errLater = errors.New("worker: turn not runnable yet")

func retryDelay(n int, err error, _ *asynq.Task) time.Duration {
	if errors.Is(err, errLater) {
		return min(time.Duration(n+1)*time.Second, 10*time.Second)
	}
	return min(time.Duration(1<<min(n, 5))*time.Second, 30*time.Second)
}
