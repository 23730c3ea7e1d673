package main

import (
	"context"
	"errors"
	"github.com/KimMachineGun/automemlimit/memlimit"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"github.com/balletplanner/ballet/api"
	"github.com/balletplanner/ballet/internal/startstop"
	"github.com/balletplanner/ballet/internal/tracing"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tasks"
)

// runtime holds what every long-running command shares: one logger, one
// Postgres pool, one Redis client and one metrics registry.
type runtime struct {
	cfg Config
	log *slog.Logger
	db  *store.DB
	rdb redis.UniversalClient
	reg *prometheus.Registry
	q   *tasks.Queue // built once, shared by the api and the worker
	// ready is the process's readiness, shared by its ops listeners.
	ready *api.Readiness
	// tracing exports the process's spans when OTEL_* say where; off
	// otherwise.
	tracing *tracing.Tracing
}

// readiness is the process's readiness checks, built once.
func (rt *runtime) readiness() *api.Readiness {
	if rt.ready == nil {
		rt.ready = api.NewReadiness(rt.db, rt.rdb)
	}
	return rt.ready
}

// setup connects to Postgres and Redis, migrating when configured, and
// registers the build info. It fails with a clear message, never a panic,
// when either is unreachable.
func setup(ctx context.Context, cfg Config, serviceName string) (*runtime, error) {
	tr, err := tracing.Start(ctx, serviceName)
	if err != nil {
		return nil, err
	}
	log := newLogger(cfg.Log, os.Stderr)
	if tr.Enabled() {
		log = slog.New(tracing.NewLogHandler(log.Handler()))
		log.InfoContext(ctx, "tracing: exporting spans over OTLP", slog.String("protocol", tr.Settings().Protocol),
			slog.String("endpoint", tr.Settings().Endpoint))
	}
	log = log.With(slog.String("service", serviceName))
	slog.SetDefault(log)
	setMemoryLimit(log, memlimit.FromCgroup)
	redis.SetLogger(redisLogger{log.With(slog.String("component", "go-redis"))})
	cfg.Database.ApplicationName = "ballet-" + serviceName
	db, err := store.Open(ctx, cfg.Database)
	if err != nil {
		stopTracing(tr, log)
		return nil, err
	}
	if cfg.Database.Migrate {
		n, err := db.Migrate(ctx)
		if err != nil {
			db.Close()
			stopTracing(tr, log)
			return nil, err
		}
		log.InfoContext(ctx, "migrations applied", slog.Int("count", n))
	}
	rdb, err := tasks.NewRedisClient(cfg.Redis)
	if err != nil {
		db.Close()
		stopTracing(tr, log)
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, cfg.Redis.DialTimeout)
	defer cancel()
	if err := tasks.Ping(pctx, rdb, cfg.Redis); err != nil {
		db.Close()
		_ = rdb.Close()
		stopTracing(tr, log)
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	buildInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ballet_build_info", Help: "Build information of the running process; always 1.",
	}, []string{"service", "version"})
	buildInfo.WithLabelValues(serviceName, version).Set(1)
	reg.MustRegister(buildInfo)
	return &runtime{cfg: cfg, log: log, db: db, rdb: rdb, reg: reg, tracing: tr}, nil
}

func (rt *runtime) close() {
	_ = rt.rdb.Close()
	rt.db.Close()
	stopTracing(rt.tracing, rt.log)
}

// stopTracing exports the spans still buffered, for up to 5 s.
func stopTracing(tr *tracing.Tracing, log *slog.Logger) {
	if err := tr.Stop(5 * time.Second); err != nil {
		log.Warn("tracing: spans lost at shutdown", slog.Any("error", err))
	}
}

// run starts the services in order, waits for ctx (SIGTERM or SIGINT), then
// stops them in reverse order; a failed start stops those started, in
// reverse.
func (rt *runtime) run(ctx context.Context, services ...startstop.Service) error {
	g := startstop.NewGroup(services...)
	if err := g.Start(ctx); err != nil {
		if ctx.Err() == nil {
			return err
		}
		// SIGTERM while starting: a shutdown, not a failure.
		rt.log.Info("stopped while starting", slog.Any("error", err))
		return nil
	}
	<-ctx.Done()
	rt.log.Info("shutting down", slog.Duration("timeout", rt.cfg.Server.ShutdownTimeout))
	g.Stop()
	return nil
}

// errNoSigningKey stops a worker or a gateway started without
// gateway.signing_key, before it connects to anything.
var errNoSigningKey = errors.New("config: gateway.signing_key: required when the worker and the gateway run as separate processes: " +
	"give both the same key, e.g. export BALLET_GATEWAY_SIGNING_KEY=$(openssl rand -base64 32)")

// runServices is the body of serve, api, worker and gateway.
func runServices(ctx context.Context, name, configFile string, build func(rt *runtime) ([]startstop.Service, error)) error {
	cfg, err := LoadConfig(configPath(configFile), os.Environ())
	if err != nil {
		return err
	}
	if (name == "worker" || name == "gateway") && cfg.Gateway.SigningKey == "" {
		return errNoSigningKey
	}
	rt, err := setup(ctx, cfg, name)
	if err != nil {
		return err
	}
	defer rt.close()
	services, err := build(rt)
	if err != nil {
		return err
	}
	return rt.run(ctx, services...)
}

func runServe(ctx context.Context, configFile string) error {
	return runServices(ctx, "serve", configFile, func(rt *runtime) ([]startstop.Service, error) {
		if rt.cfg.Gateway.SigningKey == "" {
			// One process mints and checks its own gateway tokens.
			rt.cfg.Gateway.SigningKey = randomKey()
		}
		gw, err := rt.newGateway()
		if err != nil {
			return nil, err
		}
		w, err := rt.newWorker()
		if err != nil {
			return nil, err
		}
		emb, err := rt.newEmbeddings()
		if err != nil {
			return nil, err
		}
		ret, err := rt.newRetention()
		if err != nil {
			return nil, err
		}
		a, err := rt.newAPI()
		if err != nil {
			return nil, err
		}
		hooks, err := rt.webhookSenders()
		if err != nil {
			return nil, err
		}
		return append([]startstop.Service{startstop.Named("metrics listener", rt.newMetricsServer()), startstop.Named("gateway", gw),
			startstop.Named("schema gate", rt.newSchemaGate()), startstop.Named("worker", w), startstop.Named("embeddings", emb),
			startstop.Named("retention", ret), startstop.Named("api", a)}, hooks...), nil
	})
}

func runAPI(ctx context.Context, configFile string) error {
	return runServices(ctx, "api", configFile, func(rt *runtime) ([]startstop.Service, error) {
		a, err := rt.newAPI()
		if err != nil {
			return nil, err
		}
		return []startstop.Service{startstop.Named("metrics listener", rt.newMetricsServer()), startstop.Named("api", a)}, nil
	})
}

func runWorker(ctx context.Context, configFile string) error {
	return runServices(ctx, "worker", configFile, func(rt *runtime) ([]startstop.Service, error) {
		w, err := rt.newWorker()
		if err != nil {
			return nil, err
		}
		emb, err := rt.newEmbeddings()
		if err != nil {
			return nil, err
		}
		ret, err := rt.newRetention()
		if err != nil {
			return nil, err
		}
		hooks, err := rt.webhookSenders()
		if err != nil {
			return nil, err
		}
		return append([]startstop.Service{startstop.Named("metrics listener", rt.newMetricsServer()),
			startstop.Named("health listener", newOpsServer(rt, "health", rt.cfg.Worker.Addr)),
			startstop.Named("schema gate", rt.newSchemaGate()), startstop.Named("worker", w),
			startstop.Named("embeddings", emb), startstop.Named("retention", ret)}, hooks...), nil
	})
}

func runGateway(ctx context.Context, configFile string) error {
	return runServices(ctx, "gateway", configFile, func(rt *runtime) ([]startstop.Service, error) {
		gw, err := rt.newGateway()
		if err != nil {
			return nil, err
		}
		return []startstop.Service{startstop.Named("metrics listener", rt.newMetricsServer()), startstop.Named("gateway", gw)}, nil
	})
}
