// Package gateway is Ballet's LLM gateway: it serves the Anthropic Messages
// API (POST /v1/messages, JSON and server-sent events) to the planner's
// workers, authenticates them with short-lived signed tokens, calls the
// project's provider (Anthropic as is, OpenAI-compatible servers through a
// translation) with the project's credential, meters every call into
// Prometheus and Postgres, and enforces budgets and rate limits through
// Redis. Beside it are the routes the official SDKs call (POST
// /v1/messages/count_tokens, GET /v1/models and /v1/models/{model_id}) and
// POST /v1/embeddings in the OpenAI form, metered and limited alike. Its wire types, tokens and client are in package llm, so that a
// caller links no server code.
//
// The gateway is plain net/http rather than Fiber: it needs a true flush
// per server-sent event and a request context that ends when the caller
// goes away, so that the upstream call is closed at once.
package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/internal/startstop"
	"github.com/balletplanner/ballet/store"
)

// Server is the gateway service.
type Server struct {
	cfg        Config
	log        *slog.Logger
	signingKey []byte
	keyring    llm.Keyring // signingKey, then gateway.previous_signing_keys
	tokens     tokenCache
	http       *http.Client
	providers  map[string]provider
	metrics    *metrics
	usage      *usageWriter
	limiter    *limiter
	scopes     *scopeCache
	fallback   Fallback
	// upstreamRoots replaces the system's certificate authorities for the
	// upstreams' TLS (WithUpstreamRootCAs); nil in production.
	upstreamRoots *x509.CertPool
	// fallbackURL is the fallback's URL once started; "" for none.
	fallbackURL string
	upstreams   *Upstreams
	// budgets counts the token budgets by state; nil without a pool or Redis.
	budgets *budgetWatch
	// services are the usage writer, then the budget watch.
	services *startstop.Group
	// prices are DefaultPrices merged with gateway.prices.
	prices   priceTable
	stopOnce sync.Once
}

// Fallback is the upstream that answers, in the Anthropic form, the calls
// for which no provider credential is stored: the scripted fake model of a
// demo (gateway.fake). Its URL is read by Start, so it listens by then.
type Fallback interface {
	URL() string
}

// Store is all the gateway reads and writes in Postgres: the scope of a
// call (its labels, credentials and limits), the usage rows it meters, and
// the budgets the budget watch counts and reconciles. *store.DB provides
// it; the process passes its database.
type Store interface {
	// ResolveLLMScope is the scopeSource of the scope cache.
	ResolveLLMScope(ctx context.Context, organizationID, projectID string) (store.LLMScope, error)
	// InsertUsage is the usageSink of the usage writer.
	InsertUsage(ctx context.Context, rows []store.Usage) (int64, error)
	// BudgetScopes and SettledTokens are the budgetSource of the budget
	// watch: the budgeted scopes, and the usage of their periods.
	BudgetScopes(ctx context.Context) ([]store.BudgetScope, error)
	SettledTokens(ctx context.Context, spans []store.BudgetSpan) (map[string]int64, error)
}

// Option configures a Server built by New.
type Option func(*Server)

// WithFallback sends the calls for which no provider credential is stored
// to f instead of refusing them.
func WithFallback(f Fallback) Option { return func(s *Server) { s.fallback = f } }

// WithUpstreamRootCAs makes the gateway trust, for its upstreams' TLS
// certificates, the authorities in roots instead of the system's. It is
// for benchmarks and tests that serve a fake upstream over TLS with a
// certificate made at run time; no configuration key sets it.
func WithUpstreamRootCAs(roots *x509.CertPool) Option {
	return func(s *Server) { s.upstreamRoots = roots }
}

// New builds the gateway on db (a *store.DB); it starts nothing (see Start).
// rdb may be nil when no limits are ever set; reg receives the gateway's
// metrics (pass a fresh registry in tests).
func New(cfg Config, db Store, rdb redis.UniversalClient, reg prometheus.Registerer, log *slog.Logger, opts ...Option) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.SigningKey == "" {
		return nil, errors.New("gateway.signing_key: must be set")
	}
	if db == nil {
		return nil, errors.New("gateway: new: no database")
	}
	if log == nil {
		log = slog.Default()
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	s := &Server{
		cfg: cfg, log: log.With(slog.String("component", "gateway")), signingKey: []byte(cfg.SigningKey), keyring: keyring(cfg), tokens: newTokenCache(nil),
		providers: map[string]provider{store.ProviderAnthropic: anthropicProvider{}, store.ProviderOpenAI: openaiProvider{}},
	}
	for _, o := range opts {
		o(s)
	}
	s.http = newHTTPClient(cfg, s.upstreamRoots)
	var err error
	if s.prices, err = newPriceTable(cfg.Prices); err != nil {
		return nil, err
	}
	s.limiter = &limiter{rdb: rdb, prefix: cfg.RedisPrefix, now: time.Now, prices: s.prices, log: s.log}
	if s.upstreams, err = cfg.Upstreams(); err != nil {
		return nil, err
	}
	var sealer *Sealer
	key, err := cfg.CredentialsKeyBytes()
	if err != nil {
		return nil, fmt.Errorf("gateway.credentials_key: %w", err)
	}
	if key != nil {
		if sealer, err = NewSealer(key); err != nil {
			return nil, err
		}
	}
	s.scopes = newScopeCache(db, sealer, cfg.CacheTTL, nil)
	s.usage = newUsageWriter(db, s.log, cfg.UsageBatchSize, cfg.UsageBuffer, cfg.UsageFlushInterval)
	if s.metrics, err = newMetrics(reg, func() float64 { return float64(s.usage.pending()) }); err != nil {
		return nil, err
	}
	s.metrics.models = newModelLabels(cfg.MaxModelLabels)
	if s.budgets = newBudgetWatch(db, s.limiter, s.log); s.budgets != nil {
		if err := reg.Register(s.budgets); err != nil {
			return nil, fmt.Errorf("gateway: register metrics: %w", err)
		}
	}
	s.usage.m = s.metrics
	services := []startstop.Service{startstop.Named("usage writer", s.usage)}
	if s.budgets != nil {
		services = append(services, startstop.Named("budget watch", s.budgets))
	}
	s.services = startstop.NewGroup(services...)
	return s, nil
}

// Handler serves the gateway's routes; the process adds health and
// metrics. Every answer carries the call's id in request-id (the header the
// Anthropic SDKs read), x-request-id (the OpenAI SDKs') and
// x-ballet-request-id, and an Anthropic-form error body in its request_id;
// a metered call's usage row has the same id.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/messages", s.serveMessages)
	mux.HandleFunc("POST /v1/messages/count_tokens", s.serveCountTokens)
	mux.HandleFunc("GET /v1/models", s.serveModels)
	mux.HandleFunc("GET /v1/models/{model_id...}", s.serveModel)
	mux.HandleFunc("POST /v1/embeddings", s.serveEmbeddings)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, llm.ErrNotFound, "no route "+r.Method+" "+r.URL.Path+"; the gateway serves "+
			"POST /v1/messages, POST /v1/messages/count_tokens, GET /v1/models, GET /v1/models/{model_id} and POST /v1/embeddings")
	})
	return s.metrics.http.instrument(func(w http.ResponseWriter, r *http.Request) string {
		id := newRequestID()
		v := []string{id} // both headers share it, in canonical form
		h := w.Header()
		h["Request-Id"], h["X-Request-Id"], h["X-Ballet-Request-Id"] = v, v, v
		mux.ServeHTTP(w, r)
		return r.Pattern // set by mux as it routed r
	})
}

// Start allows the fallback upstream, when there is one, and runs the usage
// writer until Stop. Serve the Handler only after Start.
func (s *Server) Start(ctx context.Context) error {
	if s.fallback != nil {
		u := s.fallback.URL()
		if err := s.upstreams.allow(u); err != nil {
			return fmt.Errorf("gateway: start: fallback upstream %q: %w", u, err)
		}
		s.fallbackURL = u
	}
	return s.services.Start(ctx)
}

// Stop stops the budget watch, then writes the buffered usage (for up to
// 10 s).
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		s.services.Stop()
		s.http.CloseIdleConnections()
	})
}

// Flush writes the buffered usage rows now.
func (s *Server) Flush(ctx context.Context) error {
	if err := s.usage.flush(ctx); err != nil {
		return fmt.Errorf("gateway: flush usage: %w", err)
	}
	return nil
}

// keyring is the keys the gateway accepts tokens of.
func keyring(cfg Config) llm.Keyring {
	r := llm.Keyring{[]byte(cfg.SigningKey)}
	for _, k := range cfg.PreviousSigningKeys {
		r = append(r, []byte(k))
	}
	return r
}

// SigningKey is the key gateway tokens are signed with, for in-process minting.
func (s *Server) SigningKey() []byte { return s.signingKey }

// dateOfSecond is the Date header of one second.
type dateOfSecond struct {
	unix  int64
	value []string
}

// lastDate is the Date header of the latest second a stream began in.
var lastDate atomic.Pointer[dateOfSecond]

// httpDate is the Date header of now, formatted once a second rather than
// by net/http for every stream. The slice is shared: never modify it.
func httpDate(now time.Time) []string {
	sec := now.Unix()
	if d := lastDate.Load(); d != nil && d.unix == sec {
		return d.value
	}
	d := &dateOfSecond{unix: sec, value: []string{now.UTC().Format(http.TimeFormat)}}
	lastDate.Store(d)
	return d.value
}

func newRequestID() string {
	const prefix = "gwreq_"
	var b [12]byte
	rand.Read(b[:])
	var id [len(prefix) + 2*len(b)]byte
	hex.Encode(id[copy(id[:], prefix):], b[:])
	return string(id[:])
}

// anthropicErrorPrefix starts every Anthropic-form error body errorJSON makes.
var anthropicErrorPrefix = []byte(`{"type":"error",`)

// withRequestID adds "request_id" to an Anthropic-form error body; another
// body is returned as it is.
func withRequestID(body []byte, id string) []byte {
	if !bytes.HasPrefix(body, anthropicErrorPrefix) || !bytes.HasSuffix(body, []byte("}")) {
		return body
	}
	q, _ := json.Marshal(id)
	out := make([]byte, 0, len(body)+len(q)+14)
	out = append(out, body[:len(body)-1]...)
	out = append(out, `,"request_id":`...)
	out = append(out, q...)
	return append(out, '}')
}

// writeError answers an error in the Anthropic form.
func writeError(w http.ResponseWriter, status int, typ, msg string) {
	writeErrorBody(w, status, errorJSON(typ, msg))
}

// writeErrorBody answers an error body; one in the Anthropic form gets the
// call's request_id, as the Anthropic API's error bodies have it.
func writeErrorBody(w http.ResponseWriter, status int, body []byte) {
	if id := w.Header()["Request-Id"]; len(id) == 1 {
		body = withRequestID(body, id[0])
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(body) //nolint:errcheck // the caller may be gone
}
