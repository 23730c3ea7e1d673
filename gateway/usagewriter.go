package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sethvargo/go-retry"

	"github.com/balletplanner/ballet/internal/startstop"
	"github.com/balletplanner/ballet/store"
)

// usageSink is where usage rows go. *store.DB provides it, through the
// Store given to New; tests pass a sink that fails on demand.
type usageSink interface {
	InsertUsage(ctx context.Context, rows []store.Usage) (int64, error)
}

// usageWriter writes usage rows to Postgres in batches from a bounded
// buffer. While Postgres is unreachable rows wait in the buffer; when it is
// full the oldest are dropped and counted.
type usageWriter struct {
	sink     usageSink
	log      *slog.Logger
	size     int // the most rows a batch writes
	capacity int
	interval time.Duration
	m        *metrics

	mu  sync.Mutex
	buf []store.Usage

	flushMu sync.Mutex    // one flush at a time
	batch   []store.Usage // the rows of the flush under way, kept for the next

	kick chan struct{}
	// stopTimeout bounds the write of what is left at Stop.
	stopTimeout time.Duration
	startstop.Base
}

// usageStopTimeout is how long Stop writes the buffered usage.
const usageStopTimeout = 10 * time.Second

const maxUsageBackoff = 30 * time.Second

// usageBackoff is the schedule of the writer's waits after failed writes:
// twice the flush interval, doubling, up to 1024 intervals or
// maxUsageBackoff, whichever is shorter.
func usageBackoff(interval time.Duration) retry.Backoff {
	return retry.WithCappedDuration(min(interval<<10, maxUsageBackoff), retry.NewExponential(max(2*interval, time.Nanosecond)))
}

func newUsageWriter(sink usageSink, log *slog.Logger, batch, capacity int, interval time.Duration) *usageWriter {
	return &usageWriter{sink: sink, log: log, size: batch, capacity: capacity, interval: interval,
		kick: make(chan struct{}, 1), stopTimeout: usageStopTimeout}
}

// pending is how many rows wait in the buffer.
func (w *usageWriter) pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.buf)
}

// add buffers a row without blocking.
func (w *usageWriter) add(u store.Usage) {
	w.mu.Lock()
	if len(w.buf) >= w.capacity {
		drop := len(w.buf) - w.capacity + 1
		w.buf = append(w.buf[:0], w.buf[drop:]...)
		if w.m != nil {
			w.m.dropped.Add(float64(drop))
		}
	}
	w.buf = append(w.buf, u)
	full := len(w.buf) >= w.size
	w.mu.Unlock()
	if full {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
}

// Start runs the writer until Stop.
func (w *usageWriter) Start(ctx context.Context) error {
	if _, ok := w.StartInit(ctx); ok {
		w.Go(w.run)
	}
	return nil
}

// run writes every interval, and whenever a batch is full, until stop ends;
// a write under way then is not cut short.
func (w *usageWriter) run(stop context.Context) {
	ctx := context.WithoutCancel(stop)
	t := time.NewTimer(w.interval)
	defer t.Stop()
	failures := 0
	var backoff retry.Backoff // nil while Postgres takes the rows
	for {
		select {
		case <-stop.Done():
			return
		case <-t.C:
		case <-w.kick:
		}
		wait := w.interval
		if err := w.flush(ctx); err != nil {
			failures++
			if backoff == nil {
				backoff = usageBackoff(w.interval)
			}
			wait, _ = backoff.Next()
			w.log.WarnContext(ctx, "usage rows not written; keeping them buffered",
				slog.Int("pending", w.pending()), slog.Int("failures", failures), slog.Any("error", err))
		} else {
			failures, backoff = 0, nil
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(wait)
	}
}

// flush writes batches until the buffer is empty or a write fails; rows of
// a failed batch stay at the front of the buffer.
func (w *usageWriter) flush(ctx context.Context) error {
	w.flushMu.Lock()
	defer w.flushMu.Unlock()
	for {
		w.mu.Lock()
		n := min(len(w.buf), w.size)
		batch := append(w.batch[:0], w.buf[:n]...)
		w.batch = batch
		w.mu.Unlock()
		if n == 0 {
			return nil
		}
		if _, err := w.sink.InsertUsage(ctx, batch); err != nil {
			return fmt.Errorf("insert %d usage rows: %w", n, err)
		}
		w.mu.Lock()
		// Rows dropped meanwhile shifted the buffer: remove what was written,
		// by request id, from the front.
		i := 0
		for i < len(w.buf) && i < n && w.buf[i].RequestID == batch[i].RequestID {
			i++
		}
		w.buf = append(w.buf[:0], w.buf[i:]...)
		w.mu.Unlock()
		if w.m != nil {
			w.m.written.Add(float64(n))
		}
	}
}

// Stop stops the writer and writes what is left, for up to stopTimeout;
// rows it could not write are logged as lost.
func (w *usageWriter) Stop() {
	if err := w.close(); err != nil {
		w.log.Error("usage rows lost at stop", slog.Int("pending", w.pending()), slog.Any("error", err))
	}
}

// close stops the writer and writes what is left, within stopTimeout.
func (w *usageWriter) close() error {
	w.StopRun()
	ctx, cancel := context.WithTimeout(context.Background(), w.stopTimeout)
	defer cancel()
	return w.flush(ctx)
}
