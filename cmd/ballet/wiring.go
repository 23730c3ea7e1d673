package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/balletplanner/ballet/api"
	"github.com/balletplanner/ballet/embeddings"
	"github.com/balletplanner/ballet/gateway"
	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/internal/startstop"
	"github.com/balletplanner/ballet/internal/webhooks"
	"github.com/balletplanner/ballet/retention"
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
		rt.q = tasks.NewQueue(rt.rdb, rt.names(), rt.cfg.Worker.TurnTimeout+time.Minute,
			tasks.KeepCompleted(rt.cfg.Worker.CompletedRetention))
	}
	return rt.q
}

func (rt *runtime) newAPI() (*api.Server, error) {
	// Every /rpc socket is a file descriptor: refuse a configuration whose
	// sockets cannot all be open at once, and say both figures.
	pools := int(rt.cfg.Database.MaxConns) + redisPoolSize(rt.rdb)
	fl, err := api.CheckFileLimit(rt.cfg.Server, pools)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	rt.cfg.Server.RPCMaxConnections = fl.RPCMaxConnections
	rt.log.Info("open files", slog.Uint64("limit", fl.Limit), slog.Uint64("needed", fl.Needed),
		slog.Int("rpc_max_connections", fl.RPCMaxConnections))
	q := rt.queue()
	pub := tasks.NewPublisher(rt.rdb, rt.names(), rt.log)
	planner := tasks.NewPlanner(rt.db, q, pub, rt.cfg.Server.QueueLimits(), rt.log)
	conn, err := rt.cfg.Redis.AsynqConnOpt()
	if err != nil {
		return nil, err
	}
	mon := api.NewMonitoring(conn)
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
	hooks, err := webhooks.NewPolicy(rt.cfg.Webhooks)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
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
	rt.logSearch(context.Background())
	srv, err := api.New(rt.cfg.Server, rt.cfg.Auth, api.Deps{DB: rt.db, Redis: rt.rdb, Registry: rt.reg, Log: rt.log,
		Version: version, Planner: planner, Hub: hub, Events: events, Monitoring: mon, Sealer: sealer, Upstreams: upstreams, Webhooks: hooks,
		Embedders: rt.embedders("search:query"), RedisNamespace: rt.names().Namespace})
	if err != nil {
		return nil, err
	}
	// The metrics port's /readyz (and `ballet healthcheck`) says when the
	// public port is dead.
	rt.readiness().Require("listener", srv.Serving)
	return srv, nil
}

// redisPoolSize is the connections the process's Redis client may open.
func redisPoolSize(rdb redis.UniversalClient) int {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().PoolSize
	case *redis.ClusterClient:
		return c.Options().PoolSize
	}
	return 0
}

func (rt *runtime) newWorker() (*worker.Worker, error) {
	reg, err := tools.Planner(rt.log)
	if err != nil {
		return nil, err
	}
	key := []byte(rt.cfg.Gateway.SigningKey)
	client := llm.NewClient(rt.cfg.Gateway.URL, key, nil)
	return worker.New(rt.cfg.Worker, rt.cfg.Planner, rt.cfg.Worker.ShutdownTimeout, worker.Deps{
		DB: rt.db, Redis: rt.rdb, Queue: rt.queue(), Publisher: tasks.NewPublisher(rt.rdb, rt.names(), rt.log),
		Model: worker.GatewayModel{Client: client}, Tools: reg, Registry: rt.reg, Log: rt.log,
		Embedders: rt.embedders("search:index"), Scheduler: rt.cfg.Scheduler,
	})
}

// newEmbeddings builds the process's embeddings pipeline (the embed
// queue's server and dispatcher), off without search.embeddings_model.
func (rt *runtime) newEmbeddings() (*embeddings.Service, error) {
	return embeddings.New(embeddings.Deps{DB: rt.db, Redis: rt.rdb, Queue: rt.queue(),
		Embedders: rt.embedders("search:index"), Search: rt.cfg.Search, Registry: rt.reg, Log: rt.log})
}

// webhookSenders is the process's webhook sender when webhooks are on
// (webhooks.allowed_hosts is set), else none.
func (rt *runtime) webhookSenders() ([]startstop.Service, error) {
	if !rt.cfg.Webhooks.Enabled() {
		return nil, nil
	}
	s, err := webhooks.NewSender(rt.cfg.Webhooks, rt.db, rt.reg, rt.log)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return []startstop.Service{startstop.Named("webhook sender", s)}, nil
}

// newRetention builds the process's retention: the scheduler and the
// queue of the [retention] runs.
func (rt *runtime) newRetention() (*retention.Service, error) {
	return retention.New(rt.cfg.Retention, retention.Deps{
		DB: rt.db, Redis: rt.rdb, Names: rt.names(), Registry: rt.reg, Log: rt.log})
}

// embedders embeds through the gateway (gateway.url, signed with
// gateway.signing_key) with search.embeddings_model, metered to the scope
// asked for as subject; nil, the vector leg off, without a model.
func (rt *runtime) embedders(subject string) store.Embedders {
	model := rt.cfg.Search.EmbeddingsModel
	if model == "" {
		return nil
	}
	client := llm.NewClient(rt.cfg.Gateway.URL, []byte(rt.cfg.Gateway.SigningKey), nil)
	return func(organizationID, projectID string) store.Embedder {
		return llm.Embedder{Client: client, EmbeddingModel: model,
			Who: llm.Principal{Subject: subject, Organization: organizationID, Project: projectID}}
	}
}

// logSearch says at start how search ranks: with or without the vector
// leg, whether pgvector is installed, and that vectors are ranked by a
// brute-force scan in Go.
func (rt *runtime) logSearch(ctx context.Context) {
	if rt.cfg.Search.EmbeddingsModel == "" {
		rt.log.InfoContext(ctx, "search: full-text and trigram only (no vector leg): search.embeddings_model is empty")
		return
	}
	ext, err := rt.db.VectorExtension(ctx)
	if err != nil {
		rt.log.WarnContext(ctx, "search: look for pgvector", slog.Any("error", err))
	}
	if ext == "" {
		ext = "none"
	}
	rt.log.InfoContext(ctx, "search: full-text, trigram and vector legs; vectors are ranked by a brute-force scan in Go",
		slog.String("embeddings_model", rt.cfg.Search.EmbeddingsModel), slog.String("pgvector", ext))
	if rt.cfg.Gateway.SigningKey == "" {
		rt.log.WarnContext(ctx, "search: gateway.signing_key is empty: embeddings calls will be refused and the vector leg stays off")
	}
}

// gatewayService serves the gateway with health on gateway.addr; its metrics
// are on the process's metrics listener. With gateway.fake it also serves
// the scripted fake model on gateway.fake_addr, the gateway's fallback
// upstream.
type gatewayService struct {
	gw   *gateway.Server
	ops  *opsServer
	fake *fakeUpstream // nil without gateway.fake
	// services are the fake model, the gateway and its listener.
	services *startstop.Group
}

func (rt *runtime) newGateway() (*gatewayService, error) {
	g := &gatewayService{}
	var opts []gateway.Option
	if rt.cfg.Gateway.Fake != "" {
		f, err := newFakeUpstream(rt.cfg.Gateway, rt.log)
		if err != nil {
			return nil, err
		}
		g.fake = f
		opts = append(opts, gateway.WithFallback(f.srv))
	}
	gw, err := gateway.New(rt.cfg.Gateway, rt.db, rt.rdb, rt.reg, rt.log, opts...)
	if err != nil {
		return nil, err
	}
	g.gw = gw
	g.ops = newOpsServer(rt, "gateway", rt.cfg.Gateway.Addr)
	g.ops.mux.Handle("/v1/", gw.Handler())
	// The fake model first: the gateway reads its URL when it starts.
	var services []startstop.Service
	if g.fake != nil {
		services = append(services, startstop.Named("fake model", g.fake))
	}
	g.services = startstop.NewGroup(append(services, startstop.Named("gateway", g.gw), startstop.Named("gateway listener", g.ops))...)
	return g, nil
}

// Start starts the fake model, the gateway and its listener, in order.
func (g *gatewayService) Start(ctx context.Context) error { return g.services.Start(ctx) }

// Stop stops them in reverse.
func (g *gatewayService) Stop() { g.services.Stop() }
