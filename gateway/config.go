package gateway

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/balletplanner/ballet/gateway/llm"
)

// Config is the [gateway] section of the configuration.
type Config struct {
	// Addr is where `ballet gateway` listens.
	Addr string `toml:"addr"`
	// URL is where workers send model calls.
	URL string `toml:"url"`
	// Fake routes calls that have no provider credential to the scripted
	// fake upstream: "" (off), "demo" or the path of a script (JSON or YAML).
	// The process running the gateway serves the script on FakeAddr and
	// hands it to New as the Fallback; the Server itself reads neither.
	Fake string `toml:"fake"`
	// FakeAddr is where that fake upstream listens (loopback, a free port by
	// default).
	FakeAddr string `toml:"fake_addr"`
	// SigningKey signs and verifies gateway tokens (HMAC-SHA256); at least
	// 32 bytes.
	SigningKey string `toml:"signing_key" secret:"true"`
	// PreviousSigningKeys are keys whose tokens are still accepted while a
	// rotation runs: set the new signing_key, list the old one here until
	// its tokens have expired (gateway.token_ttl, at most a day), then drop
	// it, which revokes every token it signed.
	PreviousSigningKeys []string `toml:"previous_signing_keys" secret:"true"`
	// CredentialsKey is the base64 AES-256 key sealing provider credentials.
	CredentialsKey string `toml:"credentials_key" secret:"true"`
	// CredentialsKeyFile holds the base64 key instead of CredentialsKey.
	CredentialsKeyFile string `toml:"credentials_key_file"`
	// TokenTTL is how long a minted gateway token is valid.
	TokenTTL time.Duration `toml:"token_ttl"`
	// MaxRequestBytes caps a request body.
	MaxRequestBytes int64 `toml:"max_request_bytes"`
	// AnthropicURL and OpenAIURL are the providers' endpoints when a
	// credential names none.
	AnthropicURL string `toml:"anthropic_url"`
	OpenAIURL    string `toml:"openai_url"`
	// AllowedUpstreams are the endpoints a credential's base_url may name:
	// hosts (https on that host, port 443 unless given) or URL prefixes
	// (scheme, host, port and a path prefix). anthropic_url, openai_url and
	// the fallback upstream (the fake) are always allowed.
	AllowedUpstreams []string `toml:"allowed_upstreams"`
	// MaxModelLabels caps the distinct model names used as metric labels;
	// further names are counted under the label "_other".
	MaxModelLabels int `toml:"max_model_labels"`
	// ConnectTimeout bounds dialing an upstream; HeaderTimeout bounds the wait
	// for its response headers (long answers stream well past it).
	ConnectTimeout time.Duration `toml:"connect_timeout"`
	HeaderTimeout  time.Duration `toml:"header_timeout"`
	// RetryMaxAttempts is how many times one call is sent upstream at most.
	RetryMaxAttempts int `toml:"retry_max_attempts"`
	// RetryInitialBackoff and RetryMaxBackoff shape the exponential backoff
	// (full jitter) between attempts.
	RetryInitialBackoff time.Duration `toml:"retry_initial_backoff"`
	RetryMaxBackoff     time.Duration `toml:"retry_max_backoff"`
	// RetryMaxWait is the longest Retry-After honoured; a longer one is
	// passed to the caller instead of waited for.
	RetryMaxWait time.Duration `toml:"retry_max_wait"`
	// CacheTTL is how long a project's credentials and limits are cached.
	CacheTTL time.Duration `toml:"cache_ttl"`
	// RedisPrefix prefixes every rate-limit key in Redis.
	RedisPrefix string `toml:"redis_prefix"`
	// UsageBatchSize is the most usage rows written in one batch.
	UsageBatchSize int `toml:"usage_batch_size"`
	// UsageFlushInterval is how often buffered usage rows are written.
	UsageFlushInterval time.Duration `toml:"usage_flush_interval"`
	// UsageBuffer caps the usage rows held while Postgres is unreachable;
	// beyond it the oldest are dropped and counted.
	UsageBuffer int `toml:"usage_buffer"`
	// AnthropicModels, OpenAIModels and FakeModels are the models GET
	// /v1/models lists for a scope with an Anthropic credential, an
	// OpenAI-compatible one, or none (when the fake fallback answers), in
	// this order. The fake answers only FakeModels (the planner's default
	// model among them), as an upstream refuses a model it lacks.
	AnthropicModels []string `toml:"anthropic_models"`
	OpenAIModels    []string `toml:"openai_models"`
	FakeModels      []string `toml:"fake_models"`
	// EmbeddingModels are the models of those lists that embed text rather
	// than chat: GET /v1/models leaves them out.
	EmbeddingModels []string `toml:"embedding_models"`
	// Prices are the prices of models, by name, over DefaultPrices: what a
	// call costs is recorded with its usage, and money budgets count it.
	Prices map[string]Price `toml:"prices"`
	// EmbeddingsMaxInputs caps the texts of one POST /v1/embeddings call.
	EmbeddingsMaxInputs int `toml:"embeddings_max_inputs"`
	// EmbeddingsMaxInputBytes caps the bytes of text of one call (413 past it).
	EmbeddingsMaxInputBytes int `toml:"embeddings_max_input_bytes"`
}

// DefaultConfig returns the built-in gateway defaults.
func DefaultConfig() Config {
	return Config{
		Addr:                ":8082",
		FakeAddr:            "127.0.0.1:0",
		URL:                 "http://localhost:8082",
		TokenTTL:            10 * time.Minute,
		MaxRequestBytes:     32 << 20,
		AnthropicURL:        "https://api.anthropic.com",
		OpenAIURL:           "https://api.openai.com/v1",
		AllowedUpstreams:    []string{"api.anthropic.com", "api.openai.com"},
		MaxModelLabels:      200,
		ConnectTimeout:      10 * time.Second,
		HeaderTimeout:       5 * time.Minute,
		RetryMaxAttempts:    3,
		RetryInitialBackoff: 500 * time.Millisecond,
		RetryMaxBackoff:     8 * time.Second,
		RetryMaxWait:        30 * time.Second,
		CacheTTL:            10 * time.Second,
		RedisPrefix:         "ballet:gateway:",
		UsageBatchSize:      500,
		UsageFlushInterval:  time.Second,
		UsageBuffer:         100000,
		AnthropicModels:     []string{"claude-sonnet-5-5", "claude-opus-4-5", "claude-sonnet-4-5", "claude-haiku-4-5"},
		OpenAIModels:        []string{"gpt-4.1", "gpt-4.1-mini", "gpt-4o-mini", "text-embedding-3-small", "text-embedding-3-large"},
		FakeModels:          []string{"claude-demo", "claude-sonnet-5-5", "fake-embedding"},
		EmbeddingModels:     []string{"text-embedding-3-small", "text-embedding-3-large", "fake-embedding"},
		EmbeddingsMaxInputs: 2048,
		// About 300,000 tokens at four characters a token, OpenAI's cap.
		EmbeddingsMaxInputBytes: 1200000,
	}
}

// Validate reports the first invalid key of the section.
func (c Config) Validate() error {
	for _, kv := range [][2]string{{"gateway.url", c.URL}, {"gateway.anthropic_url", c.AnthropicURL}, {"gateway.openai_url", c.OpenAIURL}} {
		u, err := url.Parse(kv[1])
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%s: must be an http(s) URL, got %q", kv[0], kv[1])
		}
	}
	if c.Addr == "" {
		return errors.New("gateway.addr: must not be empty")
	}
	if _, err := NewUpstreams(c.AllowedUpstreams...); err != nil {
		return fmt.Errorf("gateway.allowed_upstreams: %w", err)
	}
	if c.Fake != "" && c.Fake != "demo" {
		if _, err := os.Stat(c.Fake); err != nil {
			return fmt.Errorf("gateway.fake: must be \"demo\" or a script file: %w", err)
		}
	}
	if c.Fake != "" {
		if _, _, err := net.SplitHostPort(c.FakeAddr); err != nil {
			return fmt.Errorf("gateway.fake_addr: must be host:port, got %q: %w", c.FakeAddr, err)
		}
	}
	for _, k := range [][2]string{{"gateway.signing_key", c.SigningKey}, {"gateway.credentials_key", c.CredentialsKey}} {
		if err := RefusePlaceholder(k[0], k[1]); err != nil {
			return err
		}
	}
	if c.SigningKey != "" && len(c.SigningKey) < llm.MinKeyBytes {
		return fmt.Errorf("gateway.signing_key: must be at least %d bytes, got %d (make one with: openssl rand -base64 32)", llm.MinKeyBytes, len(c.SigningKey))
	}
	for i, k := range c.PreviousSigningKeys {
		if len(k) < llm.MinKeyBytes {
			return fmt.Errorf("gateway.previous_signing_keys[%d]: must be at least %d bytes, got %d", i, llm.MinKeyBytes, len(k))
		}
	}
	if c.TokenTTL > llm.MaxTokenTTL {
		return fmt.Errorf("gateway.token_ttl: at most %s, got %s", llm.MaxTokenTTL, c.TokenTTL)
	}
	if c.CredentialsKey != "" && c.CredentialsKeyFile != "" {
		return errors.New("gateway.credentials_key: set either credentials_key or credentials_key_file, not both")
	}
	if c.CredentialsKey != "" {
		if _, err := decodeKey(c.CredentialsKey); err != nil {
			return fmt.Errorf("gateway.credentials_key: %w", err)
		}
	}
	if c.CredentialsKeyFile != "" {
		if _, err := c.CredentialsKeyBytes(); err != nil {
			return fmt.Errorf("gateway.credentials_key_file: %w", err)
		}
	}
	durations := []struct {
		key string
		v   time.Duration
	}{
		{"gateway.token_ttl", c.TokenTTL}, {"gateway.connect_timeout", c.ConnectTimeout},
		{"gateway.header_timeout", c.HeaderTimeout}, {"gateway.retry_initial_backoff", c.RetryInitialBackoff},
		{"gateway.retry_max_backoff", c.RetryMaxBackoff}, {"gateway.usage_flush_interval", c.UsageFlushInterval},
	}
	for _, d := range durations {
		if d.v <= 0 {
			return fmt.Errorf("%s: must be positive, got %s", d.key, d.v)
		}
	}
	switch {
	case c.RetryMaxWait < 0:
		return fmt.Errorf("gateway.retry_max_wait: must not be negative, got %s", c.RetryMaxWait)
	case c.CacheTTL < 0:
		return fmt.Errorf("gateway.cache_ttl: must not be negative, got %s", c.CacheTTL)
	case c.MaxRequestBytes < 1024:
		return fmt.Errorf("gateway.max_request_bytes: must be at least 1024, got %d", c.MaxRequestBytes)
	case c.RetryMaxAttempts < 1:
		return fmt.Errorf("gateway.retry_max_attempts: must be at least 1, got %d", c.RetryMaxAttempts)
	case c.UsageBatchSize < 1:
		return fmt.Errorf("gateway.usage_batch_size: must be at least 1, got %d", c.UsageBatchSize)
	case c.UsageBuffer < c.UsageBatchSize:
		return fmt.Errorf("gateway.usage_buffer: must be at least usage_batch_size (%d), got %d", c.UsageBatchSize, c.UsageBuffer)
	case c.MaxModelLabels < 1:
		return fmt.Errorf("gateway.max_model_labels: must be at least 1, got %d", c.MaxModelLabels)
	case c.RedisPrefix == "":
		return errors.New("gateway.redis_prefix: must not be empty")
	case c.EmbeddingsMaxInputs < 1:
		return fmt.Errorf("gateway.embeddings_max_inputs: must be at least 1, got %d", c.EmbeddingsMaxInputs)
	case c.EmbeddingsMaxInputBytes < 1:
		return fmt.Errorf("gateway.embeddings_max_input_bytes: must be at least 1, got %d", c.EmbeddingsMaxInputBytes)
	}
	for _, list := range []struct {
		key    string
		models []string
	}{{"gateway.anthropic_models", c.AnthropicModels}, {"gateway.openai_models", c.OpenAIModels}, {"gateway.fake_models", c.FakeModels}, {"gateway.embedding_models", c.EmbeddingModels}} {
		for i, m := range list.models {
			if err := validateModel(m); err != nil {
				return fmt.Errorf("%s[%d]: %w", list.key, i, err)
			}
		}
	}
	for m := range c.Prices {
		if err := validateModel(m); err != nil {
			return fmt.Errorf("gateway.prices: %w", err)
		}
	}
	if _, err := newPriceTable(c.Prices); err != nil {
		return err
	}
	return nil
}

// CredentialsKeyBytes returns the AES-256 key from credentials_key or
// credentials_key_file, or nil when neither is set.
func (c Config) CredentialsKeyBytes() ([]byte, error) {
	raw := c.CredentialsKey
	if c.CredentialsKeyFile != "" {
		b, err := os.ReadFile(c.CredentialsKeyFile)
		if err != nil {
			return nil, err
		}
		raw = string(b)
	}
	if raw == "" {
		return nil, nil
	}
	return decodeKey(raw)
}

// placeholderPrefixes and placeholderWords are what a key is compared with
// lower-cased and stripped of everything but letters and digits:
// "change-me-in-production" and "REPLACE-ME-…" start with a prefix, "secret"
// is a word.
var (
	placeholderPrefixes = []string{"changeme", "replaceme"}
	placeholderWords    = []string{"secret", "example", "placeholder", "password", "changeit"}
)

// RefusePlaceholder returns an error naming key when value is an obvious
// placeholder rather than a key: one starting with change-me or replace-me
// (any case and punctuation), one of the words secret, example,
// placeholder, password or changeit, or one letter or digit repeated
// (kkkk…, 0000…, base64 padding aside). An empty value is not a placeholder.
func RefusePlaceholder(key, value string) error {
	v := strings.TrimRight(strings.TrimSpace(value), "=")
	if v == "" {
		return nil
	}
	norm := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			return r
		case r >= 'A' && r <= 'Z':
			return r + 'a' - 'A'
		}
		return -1
	}, v)
	placeholder := len(v) >= 2 && len(norm) == len(v) && strings.Count(norm, norm[:1]) == len(norm)
	for _, p := range placeholderPrefixes {
		placeholder = placeholder || strings.HasPrefix(norm, p)
	}
	placeholder = placeholder || slices.Contains(placeholderWords, norm)
	if !placeholder {
		return nil
	}
	return fmt.Errorf("%s: is a placeholder, not a key (change-me…, replace-me…, secret, example or one repeated character); "+
		"make a real one with: openssl rand -base64 32", key)
}

func decodeKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		b, err = base64.RawStdEncoding.DecodeString(s)
	}
	if err != nil {
		return nil, errors.New("must be base64")
	}
	if len(b) != 32 {
		return nil, fmt.Errorf("must be a 32-byte (AES-256) key, got %d bytes", len(b))
	}
	return b, nil
}
