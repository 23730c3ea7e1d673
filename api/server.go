package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/balletplanner/ballet/internal/startstop"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tasks"
)

// Deps are what the api needs from the process that runs it.
type Deps struct {
	DB    *store.DB
	Redis redis.UniversalClient
	// Registry is the process's metrics registry. The api serves no
	// /metrics itself: the process serves it on metrics.addr.
	Registry *prometheus.Registry
	Log      *slog.Logger
	Version  string
	// Planner sends and cancels turns; nil leaves the planner routes out.
	Planner *tasks.Planner
	// Hub fans live planner outputs out to this process's watchers (the
	// outputs route's event stream); the server starts and stops it. nil
	// answers a stream request with 503.
	Hub *tasks.Hub
	// Events follows the event log for /rpc's stream.subscribe; the server
	// starts and stops it. nil answers stream methods with -32601.
	Events *tasks.EventHub
	// Monitoring is the asynq dashboard, mounted at /monitoring/ for the
	// roles bound at platform scope, its buttons for platform admins; nil
	// leaves it out.
	Monitoring *Monitoring
	// Sealer encrypts provider API keys for the credentials routes (the
	// gateway's *gateway.Sealer); nil, when gateway.credentials_key is not
	// configured, makes them refuse to store keys.
	Sealer CredentialSealer
	// Upstreams decides which base_url a credential may name (the gateway's
	// *gateway.Upstreams, built from gateway.allowed_upstreams); nil checks
	// only its form.
	Upstreams UpstreamPolicy
	// Webhooks decides which webhook URL a send may name (the
	// *webhooks.Policy of webhooks.allowed_hosts); nil refuses every one.
	Webhooks WebhookPolicy
	// RedisNamespace prefixes the api's own Redis keys (stream tickets),
	// as redis.namespace does the queue's.
	RedisNamespace string
	// Embedders embed search queries for the semantic leg of GET /search
	// and the knowledge search, metered to the scope the store names; nil
	// leaves those searches full-text and trigram only.
	Embedders store.Embedders
}

// Server is the api service: a Fiber app with every route registered.
type Server struct {
	cfg  Config
	auth AuthConfig
	db   *store.DB
	rdb  redis.UniversalClient
	log  *slog.Logger
	app  *fiber.App
	ln   net.Listener
	// listenerErr is why the public listener stopped without a Stop.
	listenerErr atomic.Pointer[error]
	// acceptStalls counts Accept errors waited out (patientListener).
	acceptStalls atomic.Int64
	// access wakes a subject's stream rechecks when its access shrinks.
	access *accessWatch
	// shares keeps the /rpc pool from being one address's or tenant's.
	shares *rpcShares
	done   chan error
	oidc   *oidcVerifier // nil unless auth.oidc.issuer_url is set
	// failures limits failed authentications per client address and token.
	failures *failureLimiter
	// proxies are server.trusted_proxies: the peers whose X-Forwarded-For
	// names the client (remoteIP).
	proxies []netip.Prefix

	planner *tasks.Planner
	hub     *tasks.Hub
	events  *tasks.EventHub
	// background is the access watch, the event hub and the hub, started
	// once the port listens and stopped once it has drained.
	background *startstop.Group
	streams    rpcStreams
	// stopping is closed when Stop begins: event streams end on it.
	stopping   chan struct{}
	stopOnce   sync.Once
	monitoring *Monitoring
	sealer     CredentialSealer
	upstreams  UpstreamPolicy
	webhooks   WebhookPolicy
	embedders  store.Embedders

	rpcCfg   rpcSettings
	rpcConns rpcRegistry
	ready    *Readiness

	// redisNamespace prefixes the api's Redis keys (Deps.RedisNamespace).
	redisNamespace string
}

// New builds the api and registers its routes.
func New(cfg Config, auth AuthConfig, d Deps) (*Server, error) {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	s := &Server{cfg: cfg, auth: auth, db: d.DB, rdb: d.Redis, redisNamespace: d.RedisNamespace, log: d.Log,
		planner: d.Planner, hub: d.Hub, events: d.Events, stopping: make(chan struct{}), monitoring: d.Monitoring, sealer: d.Sealer, upstreams: d.Upstreams, webhooks: d.Webhooks,
		embedders: d.Embedders, ready: NewReadiness(d.DB, d.Redis)}
	if auth.OIDC.IssuerURL != "" {
		s.oidc = newOIDCVerifier(auth.OIDC, d.Log)
	}
	if d.DB != nil {
		s.access = newAccessWatch(d.DB, d.Log)
	}
	s.background = s.backgroundServices()
	s.failures = newFailureLimiter(auth.failureLimits())
	proxies, err := parseTrustedProxies(cfg.TrustedProxies)
	if err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	s.proxies = proxies
	s.rpcCfg = cfg.rpc()
	s.shares = newRPCShares(s.rpcCfg)
	fcfg := fiber.Config{
		AppName:               "ballet",
		BodyLimit:             cfg.BodyLimit,
		DisableStartupMessage: true,
		ErrorHandler:          s.handleError,
		ReadTimeout:           30 * time.Second,
		IdleTimeout:           120 * time.Second,
		// A /rpc socket then keeps no request read buffer once upgraded.
		ReduceMemoryUsage: true,
	}
	fiberProxyConfig(&fcfg, proxies)
	s.app = fiber.New(fcfg)
	s.app.Server().Handler = releaseUpgradedRequest(s.app.Server().Handler)
	if err := s.useHTTPMetrics(d.Registry); err != nil {
		return nil, err
	}
	if d.Registry != nil {
		if err := s.useRPCMetrics(d.Registry); err != nil {
			return nil, err
		}
	}
	s.routes()
	return s, nil
}

// App returns the Fiber app, for tests that call app.Test.
func (s *Server) App() *fiber.App { return s.app }

// Start listens on cfg.Addr and serves until Stop.
func (s *Server) Start(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("api: listen on %s: %w", s.cfg.Addr, err)
	}
	if err := s.background.Start(ctx); err != nil {
		_ = ln.Close()
		return fmt.Errorf("api: %w", err)
	}
	s.ln = ln
	s.done = make(chan error, 1)
	go func() {
		err := s.app.Listener(patientListener{Listener: lingerListener{ln}, log: s.log, stalled: &s.acceptStalls})
		select {
		case <-s.stopping:
		default:
			// Not a Stop: the public port is dead. Readiness says so.
			if err == nil {
				err = errors.New("the listener stopped")
			}
			s.log.Error("api: the public listener stopped serving", slog.String("addr", ln.Addr().String()), slog.Any("error", err))
			s.listenerErr.Store(&err)
		}
		s.done <- err
	}()
	s.log.InfoContext(ctx, "api listening", slog.String("addr", ln.Addr().String()))
	return nil
}

// Serving reports whether the public listener serves: nil while it does
// (or before Start), the reason once it stopped without a Stop. Readiness
// checks it, so that a process whose port is dead is not ready.
func (s *Server) Serving() error {
	if p := s.listenerErr.Load(); p != nil {
		return fmt.Errorf("the public listener on %s stopped: %w", s.cfg.Addr, *p)
	}
	return nil
}

// Addr is the address the api listens on, once started.
func (s *Server) Addr() string {
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Stop stops accepting requests and waits for running ones up to the
// shutdown timeout; event streams end at once. Calls after the first do
// nothing.
func (s *Server) Stop() { s.stopOnce.Do(s.stop) }

func (s *Server) stop() {
	close(s.stopping)
	s.rpcConns.drain(s.cfg.ShutdownTimeout)
	if err := s.app.ShutdownWithTimeout(s.cfg.ShutdownTimeout); err != nil {
		s.log.Warn("api shutdown", slog.Any("error", err))
	}
	// fasthttp's shutdown closes only the listeners its Serve has already
	// taken; a Stop right after Start can come first, so the listener is
	// closed here too and that Serve returns at its first Accept.
	if s.ln != nil {
		_ = s.ln.Close()
	}
	if s.done != nil {
		<-s.done
	}
	s.background.Stop()
}

// backgroundServices are the api's services beside its port, in their
// start order: the access watch, the event hub, the hub. They stop in
// reverse, the hub first, ending its watches.
func (s *Server) backgroundServices() *startstop.Group {
	var services []startstop.Service
	if s.access != nil {
		services = append(services, startstop.Named("access watch", s.access))
	}
	if s.events != nil {
		services = append(services, startstop.Named("event hub", s.events))
	}
	if s.hub != nil {
		services = append(services, startstop.Named("hub", s.hub))
	}
	return startstop.NewGroup(services...)
}

func (s *Server) routes() {
	s.app.Use(s.accessLog) // first: it logs every answer, errors included
	s.app.Get("/healthz", func(c *fiber.Ctx) error { return c.JSON(fiber.Map{"status": "ok"}) })
	s.app.Get("/readyz", s.readyz)
	if s.monitoring != nil {
		s.mountMonitoring(s.monitoring)
	}
	s.registerRPC()
	s.useCORS()                               // before authentication: a preflight carries no token
	s.registerOpenAPI(s.app.Group("/api/v1")) // public: before the authenticated group
	if s.planner != nil {
		// An EventSource's stream, authenticated by a stream ticket.
		s.app.Get("/api/v1/planner/sessions/:session/outputs", s.ticketStream)
	}
	v1 := s.app.Group("/api/v1", s.checkInput, s.authenticate)
	s.registerV1(v1)
	s.mountWebApp() // last: the browser app answers the paths no route took
}

// readyz answers 200 when Postgres and Redis answer and the schema is
// current, else 503, in the one shape of every process (Readiness).
func (s *Server) readyz(c *fiber.Ctx) error {
	rep := s.ready.Check(c.UserContext())
	if !rep.Ready() {
		c.Status(fiber.StatusServiceUnavailable)
	}
	return c.JSON(rep)
}

// httpStatus maps each error code to its HTTP status: the one table.
var httpStatus = map[store.Code]int{
	store.CodeInvalid:         fiber.StatusBadRequest,
	store.CodeUnauthenticated: fiber.StatusUnauthorized,
	store.CodeForbidden:       fiber.StatusForbidden,
	store.CodeNotFound:        fiber.StatusNotFound,
	store.CodeAlreadyExists:   fiber.StatusConflict,
	store.CodeConflict:        fiber.StatusConflict,
	store.CodeResyncRequired:  fiber.StatusGone,
	store.CodeExhausted:       fiber.StatusTooManyRequests,
	store.CodeInternal:        fiber.StatusInternalServerError,
	store.CodeUnavailable:     fiber.StatusServiceUnavailable,
}

// errorBody is the REST error shape of SPEC §10.
type errorBody struct {
	Error   store.Code     `json:"error"`
	Message string         `json:"message"`
	Details map[string]any `json:"details,omitempty"`
}

func (s *Server) handleError(c *fiber.Ctx, err error) error {
	var fe *fiber.Error
	if se := store.AsError(err); se != nil {
		if se.Code == store.CodeUnavailable {
			s.log.WarnContext(c.UserContext(), "request refused: postgres unavailable", slog.String("method", c.Method()),
				slog.String("path", c.Path()), slog.Any("error", err))
			c.Set(fiber.HeaderRetryAfter, strconv.Itoa(int(store.UnavailableRetryAfter.Seconds())))
		}
		return c.Status(httpStatus[se.Code]).JSON(errorBody{Error: se.Code, Message: se.Message, Details: se.Details})
	}
	switch {
	case errors.As(err, &fe):
		code := store.CodeInternal
		msg := fe.Message
		switch {
		case fe.Code == fiber.StatusRequestEntityTooLarge:
			code, msg = store.CodeInvalid, fmt.Sprintf("request body exceeds %d bytes", s.cfg.BodyLimit)
		case fe.Code == fiber.StatusNotFound:
			code = store.CodeNotFound
		case fe.Code == fiber.StatusMethodNotAllowed || fe.Code < 500:
			code = store.CodeInvalid
		}
		return c.Status(fe.Code).JSON(errorBody{Error: code, Message: msg})
	}
	s.log.ErrorContext(c.UserContext(), "request failed", slog.String("method", c.Method()),
		slog.String("path", c.Path()), slog.Any("error", err))
	return c.Status(fiber.StatusInternalServerError).JSON(errorBody{Error: store.CodeInternal, Message: "internal error"})
}
