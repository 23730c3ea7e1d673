package tasks

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
)

// Timings of a Postgres LISTEN connection held by a Listener.
const (
	listenPing    = 30 * time.Second // a silent LISTEN connection is pinged this often
	listenTimeout = 10 * time.Second // connect and ping
	listenBackoff = 50 * time.Millisecond
	listenMaxWait = 5 * time.Second
)

// Listener holds one Postgres LISTEN connection until its context ends:
// it connects, reconnecting with backoff (doubling from 50 ms up to 5 s),
// pings a silent connection every 30 s, and hands each notification's
// payload to Notify. The event hub and the embeddings dispatcher each
// run one.
type Listener struct {
	// Name prefixes its log lines ("event listener", "embed dispatcher").
	Name string
	// Connect opens a connection that LISTENs already.
	Connect func(ctx context.Context) (*pgx.Conn, error)
	// Connected runs after each connect, before any notification is read;
	// reconnect is false the first time. A notification sent while nobody
	// listened is lost, so it catches up from the stored truth.
	Connected func(ctx context.Context, reconnect bool)
	// Notify receives each notification's payload.
	Notify func(ctx context.Context, payload string)
	Log    *slog.Logger
}

// Run holds the connection until ctx ends.
func (l Listener) Run(ctx context.Context) {
	backoff := listenerBackoff()
	for first := true; ; first = false {
		cctx, cancel := context.WithTimeout(ctx, listenTimeout)
		conn, err := l.Connect(cctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			d := nextWait(backoff)
			l.Log.WarnContext(ctx, l.Name+": connect", slog.Any("error", err), slog.Duration("retry_in", d))
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
			continue
		}
		backoff = listenerBackoff()
		l.Connected(ctx, !first)
		err = l.wait(ctx, conn)
		_ = conn.Close(context.Background())
		if ctx.Err() != nil {
			return
		}
		l.Log.WarnContext(ctx, l.Name+": connection lost; reconnecting", slog.Any("error", err))
	}
}

// wait reads notifications until the connection fails.
func (l Listener) wait(ctx context.Context, conn *pgx.Conn) error {
	for {
		wctx, cancel := context.WithTimeout(ctx, listenPing)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			l.Notify(ctx, n.Payload)
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, context.DeadlineExceeded):
			pctx, cancel := context.WithTimeout(ctx, listenTimeout)
			err := conn.Ping(pctx)
			cancel()
			if err != nil {
				return err
			}
		default:
			return err
		}
	}
}
