package api_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/balletplanner/ballet/api"
	"github.com/balletplanner/ballet/api/rpcclient"
	"github.com/balletplanner/ballet/store/storetest"
	"github.com/balletplanner/ballet/tasks/taskstest"
)

// scrapeText is reg's exposition, as a scrape shows it.
func scrapeText(reg *prometheus.Registry) string {
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}

// TestRPCConnectionMetrics: a scrape shows the /rpc sockets the process
// holds and server.rpc_max_connections; closing a socket counts down.
func TestRPCConnectionMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rdb, _ := taskstest.New(t)
	cfg := api.DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	cfg.RPCMaxConnections = 5
	reg := prometheus.NewRegistry()
	srv, err := api.New(cfg, api.DefaultAuthConfig(), api.Deps{DB: e.db, Redis: rdb, Registry: reg, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)

	shows := func(want ...string) func() bool {
		return func() bool {
			body := scrapeText(reg)
			for _, w := range want {
				if !strings.Contains(body, "\n"+w+"\n") {
					return false
				}
			}
			return true
		}
	}
	storetest.WaitFor(t, "no sockets and the limit in a scrape",
		shows("ballet_rpc_connections 0", "ballet_rpc_connections_limit 5"))

	var clients []*rpcclient.Client
	for _, proto := range []string{rpcclient.JSON, rpcclient.Msgpack} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		c, err := rpcclient.Dial(ctx, "ws://"+srv.Addr()+"/rpc", proto, e.tokens["viewer"], &rpcclient.Options{Heartbeat: -1})
		cancel()
		if err != nil {
			t.Fatalf("dial %s: %v", proto, err)
		}
		t.Cleanup(func() { _ = c.Close() })
		clients = append(clients, c)
	}
	storetest.WaitFor(t, "two sockets in a scrape", shows("ballet_rpc_connections 2", "ballet_rpc_connections_limit 5"))
	_ = clients[0].Close()
	storetest.WaitFor(t, "one socket in a scrape after a close", shows("ballet_rpc_connections 1"))
}
