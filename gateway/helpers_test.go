package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/balletplanner/ballet/gateway/fakellm"
	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
)

// env is one gateway over real HTTP on its own database, Redis namespace
// and fake upstream.
type env struct {
	db      *store.DB
	rdb     *redis.Client
	srv     *Server
	url     string
	fake    *fakellm.Server
	reg     *prometheus.Registry
	sealer  *Sealer
	cfg     Config
	org     string
	project string
	client  *llm.Client
}

type envOption func(*envSettings)

type envSettings struct {
	cfg      func(*Config)
	provider string // credential provider; "" for none
	fallback *fakellm.Script
}

func withConfig(f func(*Config)) envOption { return func(s *envSettings) { s.cfg = f } }
func withProvider(p string) envOption      { return func(s *envSettings) { s.provider = p } }

// withFallback answers the calls without a provider credential from a
// second fake playing script, as gateway.fake does.
func withFallback(script *fakellm.Script) envOption {
	return func(s *envSettings) { s.fallback = script }
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func testRedis(t testing.TB) *redis.Client {
	t.Helper()
	opts := &redis.Options{Addr: "127.0.0.1:6379"}
	if u := os.Getenv("BALLET_TEST_REDIS_URL"); u != "" {
		var err error
		if opts, err = redis.ParseURL(u); err != nil {
			t.Fatalf("BALLET_TEST_REDIS_URL: %v", err)
		}
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// newEnv starts a fake upstream playing script and a gateway whose
// organization holds an anthropic credential pointing at it.
func newEnv(t testing.TB, script *fakellm.Script, opts ...envOption) *env {
	t.Helper()
	set := envSettings{provider: store.ProviderAnthropic}
	for _, o := range opts {
		o(&set)
	}
	ctx := context.Background()
	e := &env{db: storetest.New(t), rdb: testRedis(t), reg: prometheus.NewRegistry()}
	if err := e.db.Pool().QueryRow(ctx, `INSERT INTO organizations (key, name) VALUES ('acme', 'Acme') RETURNING id::text`).Scan(&e.org); err != nil {
		t.Fatal(err)
	}
	if err := e.db.Pool().QueryRow(ctx, `INSERT INTO projects (organization_id, key, name) VALUES ($1, 'DEMO', 'Demo') RETURNING id::text`, e.org).Scan(&e.project); err != nil {
		t.Fatal(err)
	}
	e.fake = fakellm.New(script)
	if err := e.fake.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.fake.Close)

	key := make([]byte, 32)
	rand.Read(key)
	cfg := DefaultConfig()
	cfg.SigningKey = randomHex(32)
	cfg.CredentialsKey = base64.StdEncoding.EncodeToString(key)
	cfg.RedisPrefix = "test:" + randomHex(8) + ":"
	cfg.RetryInitialBackoff, cfg.RetryMaxBackoff = time.Millisecond, 5*time.Millisecond
	cfg.UsageFlushInterval = 20 * time.Millisecond
	// The test's fake upstream is the operator's, like gateway.fake.
	cfg.AllowedUpstreams = append(cfg.AllowedUpstreams, e.fake.URL())
	if set.cfg != nil {
		set.cfg(&cfg)
	}
	e.cfg = cfg
	var err error
	if e.sealer, err = NewSealer(key); err != nil {
		t.Fatal(err)
	}
	switch set.provider {
	case store.ProviderAnthropic:
		e.putCredential(t, "", store.ProviderAnthropic, e.fake.URL())
	case store.ProviderOpenAI:
		e.putCredential(t, "", store.ProviderOpenAI, e.fake.URL()+"/v1")
	}
	t.Cleanup(func() {
		var keys []string
		iter := e.rdb.Scan(context.Background(), 0, cfg.RedisPrefix+"*", 1000).Iterator()
		for iter.Next(context.Background()) {
			keys = append(keys, iter.Val())
		}
		if len(keys) > 0 {
			e.rdb.Del(context.Background(), keys...)
		}
	})
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	var gwOpts []Option
	var fallback *fakellm.Server
	if set.fallback != nil {
		fallback = fakellm.New(set.fallback)
		gwOpts = append(gwOpts, WithFallback(fallback))
	}
	e.srv, err = New(cfg, e.db, e.rdb, e.reg, log, gwOpts...)
	if err != nil {
		t.Fatal(err)
	}
	if fallback != nil {
		// New starts nothing: the fallback may listen only now, before Start.
		if err := fallback.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(fallback.Close)
	}
	// One fixed clock for the limiter, so no test straddles a minute.
	frozen := time.Now()
	e.srv.limiter.now = func() time.Time { return frozen }
	if err := e.srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.srv.Stop)
	hs := httptest.NewServer(e.srv.Handler())
	t.Cleanup(hs.Close)
	e.url = hs.URL
	e.client = llm.NewClient(hs.URL, []byte(cfg.SigningKey), nil)
	return e
}

func (e *env) putCredential(t testing.TB, project, provider, baseURL string) {
	t.Helper()
	c := e.sealer.SealCredential(e.org, project, provider, "sk-test-"+provider, baseURL, "alice")
	if _, err := e.db.PutCredential(context.Background(), c); err != nil {
		t.Fatal(err)
	}
}

// principal is the planner of a session of the demo project.
func (e *env) principal() llm.Principal {
	return llm.Principal{Organization: e.org, Project: e.project, Session: "6f1c2a52-7b1e-4c55-9b8e-2f0d7b1b1a01", ActingFor: "alice"}
}

func (e *env) token(t testing.TB) string {
	t.Helper()
	tok, err := e.client.Token(e.principal())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// post sends a raw request body with the given Authorization token.
func (e *env) post(t testing.TB, token string, body any) (*http.Response, []byte) {
	t.Helper()
	b, ok := body.([]byte)
	if !ok {
		var err error
		if b, err = json.Marshal(body); err != nil {
			t.Fatal(err)
		}
	}
	return e.send(t, http.MethodPost, "/v1/messages", token, b)
}

// send makes one request of any route with the given Authorization token
// ("" for none) and returns the answer with its body read.
func (e *env) send(t testing.TB, method, path, token string, body []byte) (*http.Response, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, _ := http.NewRequest(method, e.url+path, rd)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp, out
}

func hello(stream bool) llm.MessageRequest {
	return llm.MessageRequest{Model: "claude-test", MaxTokens: 100, Stream: stream,
		Messages: []llm.Message{{Role: llm.RoleUser, Content: llm.Content{{Type: llm.BlockText, Text: "hello"}}}}}
}

// usageRows returns the usage rows written once there are want of them:
// the gateway records a call just after its last byte reached the caller.
func (e *env) usageRows(t testing.TB, want int) []store.Usage {
	t.Helper()
	var rows []store.Usage
	storetest.Poll(storetest.WaitTimeout, func() bool {
		rows = e.readUsage(t)
		return len(rows) >= want
	})
	return rows
}

func (e *env) readUsage(t testing.TB) []store.Usage {
	t.Helper()
	ctx := context.Background()
	if err := e.srv.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	rows, err := e.db.Pool().Query(ctx, `SELECT request_id, caller, provider, model, status, input_tokens, output_tokens,
		cache_read_tokens, cache_write_tokens, estimated, cost_micro_usd FROM usage ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []store.Usage
	for rows.Next() {
		var u store.Usage
		if err := rows.Scan(&u.RequestID, &u.Caller, &u.Provider, &u.Model, &u.Status, &u.InputTokens, &u.OutputTokens,
			&u.CacheReadTokens, &u.CacheWriteTokens, &u.Estimated, &u.CostMicroUSD); err != nil {
			t.Fatal(err)
		}
		out = append(out, u)
	}
	return out
}

// counter reads a counter of the env's registry by name and labels.
func (e *env) counter(t testing.TB, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if matches(m, labels) {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

func matches(m *dto.Metric, labels map[string]string) bool {
	for k, v := range labels {
		found := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == k && lp.GetValue() == v {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// errorOf decodes an Anthropic error body.
func errorOf(t testing.TB, body []byte) llm.ErrorDetail {
	t.Helper()
	var eb llm.ErrorBody
	if err := json.Unmarshal(body, &eb); err != nil || eb.Type != "error" {
		t.Fatalf("not an Anthropic error: %s", body)
	}
	return eb.Error
}

func mustContain(t testing.TB, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Fatalf("%q does not contain %q", s, sub)
		}
	}
}
