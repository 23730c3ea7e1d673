// Package gateway is Ballet's LLM gateway: it serves the Anthropic Messages
// API (POST /v1/messages, JSON and server-sent events) to the planner's
// workers, authenticates them with short-lived signed tokens, calls the
// project's provider (Anthropic as is, OpenAI-compatible servers through a
// translation) with the project's credential, meters every call into
// Prometheus and Postgres, and enforces budgets and rate limits through
// Redis. It also holds the client workers use.
//
// The gateway is plain net/http rather than Fiber: it needs a true flush
// per server-sent event and a request context that ends when the caller
// goes away, so that the upstream call is closed at once.
package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/balletplanner/ballet/gateway/fakellm"
	"github.com/balletplanner/ballet/store"
)

// Server is the gateway service.
type Server struct {
	cfg        Config
	log        *slog.Logger
	signingKey []byte
	http       *http.Client
	providers  map[string]provider
	metrics    *metrics
	usage      *usageWriter
	limiter    *limiter
	scopes     *scopeCache
	fake       *fakellm.Server
	upstreams  *Upstreams
	stopOnce   sync.Once
}

// New builds the gateway. rdb may be nil when no limits are ever set; reg
// receives the gateway's metrics (pass a fresh registry in tests).
func New(cfg Config, db *store.DB, rdb redis.UniversalClient, reg prometheus.Registerer, log *slog.Logger) (*Server, error) {
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
		cfg: cfg, log: log.With(slog.String("component", "gateway")), signingKey: []byte(cfg.SigningKey),
		http:      newHTTPClient(cfg),
		providers: map[string]provider{store.ProviderAnthropic: anthropicProvider{}, store.ProviderOpenAI: openaiProvider{}},
		limiter:   &limiter{rdb: rdb, prefix: cfg.RedisPrefix, now: time.Now},
	}
	var err error
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
	s.scopes = &scopeCache{src: db, sealer: sealer, ttl: cfg.CacheTTL, now: time.Now, entries: map[string]scopeEntry{}}
	s.usage = newUsageWriter(db, s.log, cfg.UsageBatchSize, cfg.UsageBuffer, cfg.UsageFlushInterval)
	if s.metrics, err = newMetrics(reg, func() float64 { return float64(s.usage.pending()) }); err != nil {
		return nil, err
	}
	s.metrics.models = newModelLabels(cfg.MaxModelLabels)
	s.usage.m = s.metrics
	if cfg.Fake != "" {
		script, err := fakellm.Resolve(cfg.Fake)
		if err != nil {
			return nil, fmt.Errorf("gateway.fake: %w", err)
		}
		s.fake = fakellm.New(script)
		if err := s.fake.Start(); err != nil {
			return nil, fmt.Errorf("gateway.fake: %w", err)
		}
		if err := s.upstreams.allow(s.fake.URL()); err != nil {
			return nil, fmt.Errorf("gateway.fake: %w", err)
		}
	}
	return s, nil
}

// Handler serves POST /v1/messages; the process adds health and metrics.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/messages", s.serveMessages)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, ErrNotFound, "no route "+r.Method+" "+r.URL.Path+"; the gateway serves POST /v1/messages")
	})
	return mux
}

// Start runs the usage writer until Stop.
func (s *Server) Start(ctx context.Context) error {
	s.usage.start(ctx)
	return nil
}

// Stop writes the buffered usage (for up to 10 s) and stops the fake upstream.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.usage.close(ctx); err != nil {
			s.log.Error("usage rows lost at stop", slog.Int("pending", s.usage.pending()), slog.Any("error", err))
		}
		if s.fake != nil {
			s.fake.Close()
		}
	})
}

// Flush writes the buffered usage rows now.
func (s *Server) Flush(ctx context.Context) error {
	if err := s.usage.flush(ctx); err != nil {
		return fmt.Errorf("gateway: flush usage: %w", err)
	}
	return nil
}

// SigningKey is the key gateway tokens are signed with, for in-process minting.
func (s *Server) SigningKey() []byte { return s.signingKey }

// FakeURL is the base URL of the in-process fake upstream, or "".
func (s *Server) FakeURL() string {
	if s.fake == nil {
		return ""
	}
	return s.fake.URL()
}

func newRequestID() string {
	b := make([]byte, 12)
	rand.Read(b)
	return "gwreq_" + hex.EncodeToString(b)
}

// writeError answers an error in the Anthropic form.
func writeError(w http.ResponseWriter, status int, typ, msg string) {
	writeErrorBody(w, status, errorJSON(typ, msg))
}

// writeUnavailable answers a call while Postgres cannot be reached: 503
// overloaded_error with Retry-After, the form Anthropic clients retry after
// the given wait.
func writeUnavailable(w http.ResponseWriter) {
	secs := int(store.UnavailableRetryAfter.Seconds())
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	writeError(w, http.StatusServiceUnavailable, ErrOverloaded,
		"gateway: the database is unavailable; retry in "+strconv.Itoa(secs)+" seconds")
}

func writeErrorBody(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(body) //nolint:errcheck // the caller may be gone
}
