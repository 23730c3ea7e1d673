package api_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/balletplanner/ballet/api"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tasks"
	"github.com/balletplanner/ballet/tasks/taskstest"
)

// replica starts a second api process's server on the env's database,
// with a Redis namespace of its own (its watches need none of the first's).
func (e *rpcEnv) replica(t *testing.T, cfg api.Config) *api.Server {
	t.Helper()
	rdb, rc := taskstest.New(t)
	names := tasks.Names{Namespace: rc.Namespace}
	q := tasks.NewQueue(rdb, names, time.Minute)
	t.Cleanup(q.Close)
	srv, err := api.New(cfg, api.DefaultAuthConfig(), api.Deps{DB: e.db, Redis: rdb, Registry: prometheus.NewRegistry(), Version: "test",
		Planner: tasks.NewPlanner(e.db, q, tasks.NewPublisher(rdb, names, slog.Default()), store.QueueLimits{Total: 1000, PerProject: 1000}, slog.Default()),
		Hub:     tasks.NewHub(e.db, rdb, names, slog.Default()), Events: tasks.NewEventHub(e.db, slog.Default())})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

// TestStreamsEndAtOnceWhenAccessIsRevoked: with a periodic recheck an hour
// away, a revoked token or a deleted role binding still ends the subject's
// watches, streams and outputs event streams, on every replica, because
// Postgres announces the change and each replica checks at once.
func TestStreamsEndAtOnceWhenAccessIsRevoked(t *testing.T) {
	t.Parallel()
	mod := func(c *api.Config) {
		c.StreamRecheck = time.Hour // only the announcement can end them in time
		c.RPCHeartbeat = time.Hour  // the raw sockets answer no $/heartbeat while the test waits
	}
	e := newRPCEnv(t, mod)
	cfg := api.DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	cfg.ShutdownTimeout = 5 * time.Second
	mod(&cfg)
	other := e.replica(t, cfg)
	for _, tt := range revocations(e) {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			subject, bindingID, token, tokenID := viewerOfWEB(t, e, "revoked-"+strings.ReplaceAll(tt.name, " ", "-")+"@example.com")
			here := watchAll(t, e, both[0], token)
			// A watch of the same subject on the other replica.
			ws, _, err := (&websocket.Dialer{Subprotocols: []string{api.SubprotocolJSON}, HandshakeTimeout: 10 * time.Second}).
				Dial("ws://"+other.Addr()+"/rpc", nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = ws.Close() })
			there := &rawConn{ws: ws, proto: api.SubprotocolJSON}
			if code, msg := rpcErr(there.call(t, 1, "auth", map[string]any{"token": token})); code != 0 {
				t.Fatalf("auth on the other replica: %d %s", code, msg)
			}
			if code, msg := rpcErr(there.call(t, 2, "planner.watch", map[string]any{"subscription": "w", "session": e.session})); code != 0 {
				t.Fatalf("planner.watch on the other replica: %d %s", code, msg)
			}
			tt.revoke(t, subject, bindingID, tokenID)
			for name, c := range map[string]*rawConn{"planner.watch": here.watch, "planner.watch on the other replica": there} {
				if p := c.nextEvent(t, "stream.closed", "w", nil); p["reason"] != tt.reason {
					t.Errorf("%s closed with %v, want reason %s", name, p, tt.reason)
				}
			}
			if p := here.stream.nextEvent(t, "stream.closed", "s", nil); p["reason"] != tt.reason {
				t.Errorf("stream closed with %v, want reason %s", p, tt.reason)
			}
			if got, want := sseClosed(t, here.sse), `{"reason":"`+tt.reason+`"}`; got != want {
				t.Errorf("outputs stream closed with %s, want %s", got, want)
			}
		})
	}
}
