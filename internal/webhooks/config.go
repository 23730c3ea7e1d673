// Package webhooks tells API users who hold no socket that a turn ended:
// a send may name a webhook URL (checked against the operator's allow list
// by Policy), the transaction that ends the turn writes an outbox row, and
// a Sender POSTs it, signed with the Standard Webhooks scheme, until the
// receiver accepts it.
package webhooks

import (
	"encoding/base64"
	"fmt"
	"strings"
	"time"

	"github.com/balletplanner/ballet/internal/ssrf"
)

// secretPrefix starts a Standard Webhooks signing secret.
const secretPrefix = "whsec_"

// Bounds of a signing secret's key, as the Standard Webhooks spec has them.
const (
	minSecretBytes = 24
	maxSecretBytes = 64
)

// Config is the [webhooks] section.
type Config struct {
	// AllowedHosts are the endpoints a send's webhook may name, in the
	// form of gateway.allowed_upstreams: a host is https on port 443 of
	// that host, a URL allows that scheme, host, port and path prefix.
	// Empty: webhooks are refused.
	AllowedHosts []string `toml:"allowed_hosts"`
	// AllowPrivateNetworks lets a webhook reach loopback, private and
	// link-local addresses; without it, a URL naming one and a host that
	// resolves to one are refused.
	AllowPrivateNetworks bool `toml:"allow_private_networks"`
	// SigningSecret signs every delivery: whsec_ then the base64 of 24 to
	// 64 random bytes. Required when AllowedHosts is set.
	SigningSecret string `toml:"signing_secret" secret:"true"`
	// Timeout bounds one delivery attempt.
	Timeout time.Duration `toml:"timeout"`
	// MaxAttempts and MaxAge bound the retries of a delivery: it is given
	// up after MaxAttempts attempts or once it is MaxAge old.
	MaxAttempts int           `toml:"max_attempts"`
	MaxAge      time.Duration `toml:"max_age"`
	// RetryBase is the wait after a first failed attempt; it doubles on
	// each further one (up to an hour), half of it jittered.
	RetryBase time.Duration `toml:"retry_base"`
	// PollInterval is how often a sender looks for due deliveries.
	PollInterval time.Duration `toml:"poll_interval"`
}

// Enabled reports whether sends may name webhooks (allowed_hosts is set).
func (c Config) Enabled() bool { return len(c.AllowedHosts) > 0 }

// DefaultConfig has webhooks off (no allowed host).
func DefaultConfig() Config {
	return Config{Timeout: 10 * time.Second, MaxAttempts: 8, MaxAge: 24 * time.Hour, RetryBase: 5 * time.Second,
		PollInterval: time.Second}
}

// Validate reports the first invalid key of the section.
func (c Config) Validate() error {
	for _, h := range c.AllowedHosts {
		if _, err := ssrf.ParseEntry(h); err != nil {
			return fmt.Errorf("webhooks.allowed_hosts: entry %q: %w", h, err)
		}
	}
	if c.SigningSecret != "" || len(c.AllowedHosts) > 0 {
		if err := checkSecret(c.SigningSecret); err != nil {
			return fmt.Errorf("webhooks.signing_secret: %w", err)
		}
	}
	switch {
	case c.Timeout <= 0:
		return fmt.Errorf("webhooks.timeout: must be positive, got %s", c.Timeout)
	case c.MaxAttempts < 1:
		return fmt.Errorf("webhooks.max_attempts: must be at least 1, got %d", c.MaxAttempts)
	case c.MaxAge <= 0:
		return fmt.Errorf("webhooks.max_age: must be positive, got %s", c.MaxAge)
	case c.RetryBase <= 0:
		return fmt.Errorf("webhooks.retry_base: must be positive, got %s", c.RetryBase)
	case c.PollInterval <= 0:
		return fmt.Errorf("webhooks.poll_interval: must be positive, got %s", c.PollInterval)
	}
	return nil
}

// checkSecret refuses a secret that is not whsec_ and the standard base64
// of 24 to 64 bytes.
func checkSecret(s string) error {
	const want = "must be " + secretPrefix + " then the base64 of 24 to 64 random bytes"
	if s == "" {
		return fmt.Errorf("required when webhooks.allowed_hosts is set: %s", want)
	}
	rest, ok := strings.CutPrefix(s, secretPrefix)
	if !ok {
		return fmt.Errorf("%s: it does not start with %s", want, secretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(rest)
	if err != nil {
		return fmt.Errorf("%s: %w", want, err)
	}
	if len(key) < minSecretBytes || len(key) > maxSecretBytes {
		return fmt.Errorf("%s, got %d bytes", want, len(key))
	}
	return nil
}
