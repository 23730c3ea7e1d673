package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"log/slog"
	"time"

	"github.com/hibiken/asynqmon"

	"github.com/balletplanner/ballet/api"
	"github.com/balletplanner/ballet/gateway"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tasks"
	"github.com/balletplanner/ballet/tools"
	"github.com/balletplanner/ballet/worker"
)

func randomKey() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}

func (rt *runtime) names() tasks.Names { return tasks.Names{Namespace: rt.cfg.Redis.Namespace} }

func (rt *runtime) queue() *tasks.Queue {
	if rt.q == nil {
		// asynq's own timeout is a minute past ours, so that our deadline
		// ends the turn cleanly first.
		rt.q = tasks.NewQueue(rt.rdb, rt.names(), rt.cfg.Worker.TurnTimeout+time.Minute)
	}
	return rt.q
}

func (rt *runtime) newAPI() (*api.Server, error) {
	q := rt.queue()
	pub := tasks.NewPublisher(rt.rdb, rt.names(), rt.log)
	planner := tasks.NewPlanner(rt.db, q, pub, store.QueueLimits{Total: rt.cfg.Worker.MaxQueuedTurns,
		PerProject: rt.cfg.Worker.MaxQueuedTurnsPerProject}, rt.log)
	conn, err := rt.cfg.Redis.AsynqConnOpt()
	if err != nil {
		return nil, err
	}
	mon := asynqmon.New(asynqmon.Options{RootPath: api.MonitoringPath, RedisConnOpt: conn})
	var sealer api.CredentialSealer
	key, err := rt.cfg.Gateway.CredentialsKeyBytes()
	if err != nil {
		return nil, fmt.Errorf("config: gateway.credentials_key: %w", err)
	}
	if key != nil {
		s, err := gateway.NewSealer(key)
		if err != nil {
			return nil, fmt.Errorf("config: gateway.credentials_key: %w", err)
		}
		sealer = s
	}
	upstreams, err := rt.cfg.Gateway.Upstreams()
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	// One hub per api process: one pub/sub connection for all its watchers.
	hub := tasks.NewHub(rt.db, rt.rdb, rt.names(), rt.log)
	// One event hub per api process: one LISTEN connection for all its
	// stream subscribers.
	events := tasks.NewEventHub(rt.db, rt.log)
	return api.New(rt.cfg.Server, rt.cfg.Auth, api.Deps{DB: rt.db, Redis: rt.rdb, Registry: rt.reg, Log: rt.log,
		Version: version, Planner: planner, Hub: hub, Events: events, Monitoring: mon, Sealer: sealer, Upstreams: upstreams})
}

func (rt *runtime) newWorker() (*worker.Worker, error) {
	reg, err := tools.Planner(rt.log)
	if err != nil {
		return nil, err
	}
	key := []byte(rt.cfg.Gateway.SigningKey)
	client := gateway.NewClient(rt.cfg.Gateway.URL, key, nil)
	return worker.New(rt.cfg.Worker, rt.cfg.Planner, rt.cfg.Server.ShutdownTimeout, worker.Deps{
		DB: rt.db, Redis: rt.rdb, Queue: rt.queue(), Publisher: tasks.NewPublisher(rt.rdb, rt.names(), rt.log),
		Model: worker.GatewayModel{Client: client}, Tools: reg, Registry: rt.reg, Log: rt.log,
	})
}

// gatewayService serves the gateway with health on gateway.addr; its metrics
// are on the process's metrics listener.
type gatewayService struct {
	gw  *gateway.Server
	ops *opsServer
}

func (rt *runtime) newGateway() (*gatewayService, error) {
	gw, err := gateway.New(rt.cfg.Gateway, rt.db, rt.rdb, rt.reg, rt.log)
	if err != nil {
		return nil, err
	}
	ops := newOpsServer(rt, "gateway", rt.cfg.Gateway.Addr)
	ops.mux.Handle("/v1/", gw.Handler())
	if u := gw.FakeURL(); u != "" {
		rt.log.Info("gateway answers calls without a provider credential from the scripted fake model",
			slog.String("script", rt.cfg.Gateway.Fake))
	}
	return &gatewayService{gw: gw, ops: ops}, nil
}

func (g *gatewayService) Start(ctx context.Context) error {
	if err := g.gw.Start(ctx); err != nil {
		return err
	}
	return g.ops.Start(ctx)
}

func (g *gatewayService) Stop() {
	g.ops.Stop()
	g.gw.Stop()
}
