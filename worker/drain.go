package worker

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/hibiken/asynq"

	"github.com/balletplanner/ballet/store"
)

// Drain. On Stop, asynq gives the running turns its shutdown timeout
// (worker.shutdown_timeout) to end, then cuts them off and puts their tasks
// back in the queue. A turn cut off hands its lease back (cutOff), so that
// another worker resumes it at once from what was stored; Stop waits for
// the handlers to return before it stops the goroutines and the caller
// closes what the handlers use.

// handBackTimeout bounds how long Stop waits, once asynq's shutdown timeout
// has cut the running turns off, for their handlers to hand their leases
// back and return; nothing they use is closed before.
const handBackTimeout = 5 * time.Second

// Stop drains: running turns get the shutdown timeout, then are cut off,
// hand their leases back and resume on another worker at once. Stop returns
// only when its handlers have returned (or handBackTimeout passed), so the
// caller may close what they use; a lease still held then is freed by
// expiring this worker's heartbeat. The services stop in the reverse of
// their start (Worker.lifecycle): the dispatcher candidate, the embed
// queue, the turns (drainTurns), the sweeper, the numberer, the cancel
// listener and the heartbeat. Safe before Start and twice.
func (w *Worker) Stop() {
	w.stopping.Store(true)
	w.services.Stop()
}

// drainTurns stops the asynq server, which gives the running turns the
// shutdown timeout, requeues the tasks it cuts off and returns without
// waiting for their handlers; it then waits up to handBackTimeout for them
// to hand their leases back.
func (w *Worker) drainTurns() {
	w.srv.Shutdown()
	if !w.handlers.wait(handBackTimeout) {
		w.log.Warn("turns still running after the drain; their leases are freed by expiring the worker's heartbeat",
			slog.String("worker", w.id), slog.Int("running", w.handlers.count()))
	}
}

// cutOff ends an attempt that asynq cancelled: shutdown (the task is
// already back in the queue), a lost asynq lease (Redis unreachable), or
// the dashboard's cancel button without the durable cancel flag. The lease
// is handed back and the turn resumes from what was stored.
func (w *Worker) cutOff(ctx context.Context, f store.Fence, log *slog.Logger) error {
	w.handBack(ctx, f, log)
	log.InfoContext(ctx, "turn handed back", slog.Bool("shutdown", w.stopping.Load()))
	return ctx.Err()
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
