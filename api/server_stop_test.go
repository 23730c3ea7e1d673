package api_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/balletplanner/ballet/api"
	"github.com/balletplanner/ballet/store/storetest"
	"github.com/balletplanner/ballet/tasks/taskstest"
)

// A server stopped right after it started (a SIGTERM at start-up, a test's
// cleanup) stops: it never waits on a listener nobody closed.
func TestStopRightAfterStart(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	rdb, _ := taskstest.New(t)
	cfg := api.DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	for i := range 50 {
		srv, err := api.New(cfg, api.DefaultAuthConfig(),
			api.Deps{DB: db, Redis: rdb, Registry: prometheus.NewRegistry(), Version: "test"})
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		stopped := make(chan struct{})
		go func() { srv.Stop(); close(stopped) }()
		storetest.WaitFor(t, fmt.Sprintf("start %d: Stop to return", i), func() bool {
			select {
			case <-stopped:
				return true
			default:
				return false
			}
		})
	}
}
