package main

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// opsServer serves /healthz and /readyz (api.Readiness: Postgres, Redis and
// the schema version) and any extra routes on one address: a standalone
// worker's worker.addr, the gateway's gateway.addr, and the metrics
// listener, which also serves /metrics.
type opsServer struct {
	rt   *runtime
	addr string
	name string // what the listener is, in its log line
	mux  *http.ServeMux
	srv  *http.Server
	done chan error
}

func newOpsServer(rt *runtime, name, addr string) *opsServer {
	o := &opsServer{rt: rt, name: name, addr: addr, mux: http.NewServeMux()}
	o.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"ok"}`)
	})
	// The api's /readyz answers the same: one shape for every process.
	o.mux.Handle("GET /readyz", rt.readiness())
	return o
}

// newMetricsServer is the process's one metrics listener on metrics.addr:
// the whole registry at /metrics, behind metrics.token when it is set,
// plus /healthz and /readyz. Every process has exactly one, so each process
// is one scrape target.
func (rt *runtime) newMetricsServer() *opsServer {
	o := newOpsServer(rt, "metrics", rt.cfg.Metrics.Addr)
	o.mux.Handle("GET /metrics", requireBearer(rt.cfg.Metrics.Token,
		promhttp.HandlerFor(rt.reg, promhttp.HandlerOpts{ErrorLog: slogErrorLog{rt.log}})))
	return o
}

// requireBearer lets a request through only with Authorization: Bearer
// token; an empty token lets every request through.
func requireBearer(token string, next http.Handler) http.Handler {
	if token == "" {
		return next
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get("Authorization"))
		if subtle.ConstantTimeCompare(got, want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="metrics"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"error":"unauthenticated","message":"metrics.token is set: send it as Authorization: Bearer <token>"}`)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// slogErrorLog gives promhttp's error log to slog.
type slogErrorLog struct{ l *slog.Logger }

func (e slogErrorLog) Println(v ...any) {
	e.l.Error("metrics: "+strings.TrimSpace(fmt.Sprintln(v...)), slog.String("component", "metrics"))
}

// Start listens on the address and serves until Stop.
func (o *opsServer) Start(ctx context.Context) error {
	if o.srv != nil {
		return nil
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return fmt.Errorf("%s: listen on %s: %w", o.name, o.addr, err)
	}
	o.srv = &http.Server{Handler: o.mux, ReadHeaderTimeout: 10 * time.Second}
	o.done = make(chan error, 1)
	go func() { o.done <- o.srv.Serve(ln) }()
	o.rt.log.InfoContext(ctx, o.name+" listening", slog.String("addr", ln.Addr().String()))
	return nil
}

// Stop stops the listener, waiting for running requests up to
// server.shutdown_timeout; safe before Start and twice.
func (o *opsServer) Stop() {
	if o.srv == nil {
		return
	}
	defer func() { o.srv = nil }()
	ctx, cancel := context.WithTimeout(context.Background(), o.rt.cfg.Server.ShutdownTimeout)
	defer cancel()
	_ = o.srv.Shutdown(ctx)
	if err := <-o.done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		o.rt.log.Warn(o.name+" server", slog.Any("error", err))
	}
}
