package gateway

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/balletplanner/ballet/gateway/llm"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	keyFile := filepath.Join(t.TempDir(), "key")
	os.WriteFile(keyFile, []byte("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n"), 0o600)
	tests := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"defaults", func(*Config) {}, ""},
		{"key file", func(c *Config) { c.CredentialsKeyFile = keyFile }, ""},
		{"demo fake", func(c *Config) { c.Fake = "demo" }, ""},
		{"bad url", func(c *Config) { c.URL = "localhost:8082" }, "gateway.url: "},
		{"no addr", func(c *Config) { c.Addr = "" }, "gateway.addr: "},
		{"missing fake script", func(c *Config) { c.Fake = "/nope.yaml" }, "gateway.fake: "},
		{"fake on a fixed port", func(c *Config) { c.Fake, c.FakeAddr = "demo", "127.0.0.1:8090" }, ""},
		{"fake addr without port", func(c *Config) { c.Fake, c.FakeAddr = "demo", "localhost" }, "gateway.fake_addr: must be host:port"},
		{"fake addr unused without fake", func(c *Config) { c.FakeAddr = "" }, ""},
		{"ttl", func(c *Config) { c.TokenTTL = 0 }, "gateway.token_ttl: must be positive"},
		{"short key", func(c *Config) { c.CredentialsKey = "c2hvcnQ=" }, "gateway.credentials_key: must be a 32-byte"},
		{"not base64", func(c *Config) { c.CredentialsKey = "!!" }, "gateway.credentials_key: must be base64"},
		{"both keys", func(c *Config) { c.CredentialsKey, c.CredentialsKeyFile = "x", keyFile }, "gateway.credentials_key: set either"},
		{"missing key file", func(c *Config) { c.CredentialsKeyFile = "/nope" }, "gateway.credentials_key_file: "},
		{"attempts", func(c *Config) { c.RetryMaxAttempts = 0 }, "gateway.retry_max_attempts: "},
		{"batch", func(c *Config) { c.UsageBatchSize = 0 }, "gateway.usage_batch_size: "},
		{"buffer", func(c *Config) { c.UsageBuffer = 10 }, "gateway.usage_buffer: "},
		{"flush", func(c *Config) { c.UsageFlushInterval = -time.Second }, "gateway.usage_flush_interval: "},
		{"empty list", func(c *Config) { c.AllowedUpstreams = nil }, ""},
		{"private ollama", func(c *Config) { c.AllowedUpstreams = []string{"http://10.0.0.5:11434/v1", "vllm.lan:8443"} }, ""},
		{"empty entry", func(c *Config) { c.AllowedUpstreams = []string{""} }, "gateway.allowed_upstreams: entry \"\": must not be empty"},
		{"wildcard", func(c *Config) { c.AllowedUpstreams = []string{"*.example.com"} }, "gateway.allowed_upstreams: entry \"*.example.com\": must be a host or a URL prefix"},
		{"scheme", func(c *Config) { c.AllowedUpstreams = []string{"ftp://x"} }, "gateway.allowed_upstreams: entry \"ftp://x\": scheme must be http or https"},
		{"userinfo", func(c *Config) { c.AllowedUpstreams = []string{"https://u:p@x"} }, "gateway.allowed_upstreams: entry \"https://u:p@x\": must not carry a user"},
		{"query", func(c *Config) { c.AllowedUpstreams = []string{"https://x/v1?a=b"} }, "gateway.allowed_upstreams: "},
		{"dots", func(c *Config) { c.AllowedUpstreams = []string{"https://x/v1/.."} }, "gateway.allowed_upstreams: "},
		{"labels", func(c *Config) { c.MaxModelLabels = 0 }, "gateway.max_model_labels: must be at least 1, got 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := DefaultConfig()
			tt.edit(&c)
			err := c.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("err = %v, want prefix %q", err, tt.want)
			}
		})
	}
}

func TestSealer(t *testing.T) {
	t.Parallel()
	key := bytes.Repeat([]byte{7}, 32)
	s, err := NewSealer(key)
	if err != nil {
		t.Fatal(err)
	}
	ct, nonce, keyID, fp := s.Seal([]byte("sk-secret"))
	if bytes.Contains(ct, []byte("sk-secret")) || len(nonce) != 12 || keyID != s.KeyID() || fp != Fingerprint([]byte("sk-secret")) {
		t.Fatalf("seal = %x %x %s %s", ct, nonce, keyID, fp)
	}
	if p, err := s.Open(ct, nonce, keyID); err != nil || string(p) != "sk-secret" {
		t.Fatalf("open = %q, %v", p, err)
	}
	ct2, nonce2, _, _ := s.Seal([]byte("sk-secret"))
	if bytes.Equal(ct, ct2) || bytes.Equal(nonce, nonce2) {
		t.Fatal("sealing twice gave the same ciphertext")
	}
	other, _ := NewSealer(bytes.Repeat([]byte{8}, 32))
	if _, err := other.Open(ct, nonce, keyID); err == nil {
		t.Fatal("another key's sealer opened it")
	}
	ct[0] ^= 1
	if _, err := s.Open(ct, nonce, keyID); err == nil {
		t.Fatal("tampered ciphertext opened")
	}
	if _, err := NewSealer([]byte("short")); err == nil {
		t.Fatal("short key accepted")
	}
}

func TestMintAndVerify(t *testing.T) {
	t.Parallel()
	key := []byte("signing-key")
	const org, project = "0b7d5d3e-8d1c-4a57-9a51-6f2f4c1b2a10", "5c0a9e27-41a4-4a8e-b0f3-2d7c9e1f3b20"
	p := llm.Principal{Organization: org, Project: project, Session: "sess-1", ActingFor: "alice"}
	tok, err := llm.Mint(key, p, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	got, err := llm.VerifyToken(key, tok)
	if err != nil {
		t.Fatal(err)
	}
	if got.Subject != "planner:sess-1" || got.Organization != org || got.Project != project ||
		got.ActingFor != "alice" || !got.Can(llm.CapabilityInvoke) {
		t.Fatalf("principal = %+v", got)
	}
	if _, err := llm.VerifyToken([]byte("other"), tok); !errors.Is(err, llm.ErrInvalidToken) {
		t.Fatalf("wrong key: %v", err)
	}
	for _, bad := range []llm.Principal{{}, {Organization: "o"}} {
		if _, err := llm.Mint(key, bad, time.Minute); err == nil {
			t.Fatalf("minted for %+v", bad)
		}
	}
	if _, err := llm.Mint(key, p, 0); err == nil {
		t.Fatal("minted with ttl 0")
	}
	if bearer("Bearer abc", "") != "abc" || bearer("", "xyz") != "xyz" {
		t.Fatal("bearer extraction")
	}
}

func TestBudgetPeriod(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 26, 15, 4, 5, 0, time.UTC) // a Thursday
	tests := []struct {
		period     string
		start, end string
	}{
		{"day", "2026-11-26", "2026-11-27"},
		{"week", "2026-11-23", "2026-11-30"},
		{"month", "2026-11-01", "2026-12-01"},
	}
	for _, tt := range tests {
		s, e := budgetPeriod(at, tt.period)
		if s.Format(time.DateOnly) != tt.start || e.Format(time.DateOnly) != tt.end {
			t.Errorf("%s: %s – %s", tt.period, s, e)
		}
	}
}
