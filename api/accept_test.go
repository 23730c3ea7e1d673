package api

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/balletplanner/ballet/store/storetest"
	"github.com/balletplanner/ballet/tasks/taskstest"
)

// A public listener that stops without a Stop makes the process not
// ready: /readyz of the metrics port (and `ballet healthcheck`) say so.
func TestReadinessSaysWhenThePublicListenerDied(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	rdb, _ := taskstest.New(t)
	cfg := DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	srv, err := New(cfg, DefaultAuthConfig(), Deps{DB: db, Redis: rdb, Registry: prometheus.NewRegistry(), Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	ready := NewReadiness(db, rdb)
	ready.Require("listener", srv.Serving)
	if rep := ready.Check(context.Background()); !rep.Ready() || rep.Checks["listener"] != "ok" {
		t.Fatalf("a serving api: %+v", rep)
	}
	_ = srv.ln.Close() // what a fatal Accept error does to fasthttp's Serve
	storetest.WaitFor(t, "the listener's death noticed", func() bool { return srv.Serving() != nil })
	rep := ready.Check(context.Background())
	if rep.Ready() || !strings.Contains(rep.Checks["listener"], "the public listener on 127.0.0.1:0 stopped") {
		t.Fatalf("after the listener died: %+v", rep)
	}
}
