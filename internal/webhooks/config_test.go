package webhooks_test

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/balletplanner/ballet/internal/webhooks"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	key := func(n int) string { return "whsec_" + base64.StdEncoding.EncodeToString(make([]byte, n)) }
	on := func(c *webhooks.Config) { c.AllowedHosts, c.SigningSecret = []string{"hooks.example.com"}, key(32) }
	tests := []struct {
		name string
		mod  func(*webhooks.Config)
		want string // "" for valid
	}{
		{"default is off and valid", func(*webhooks.Config) {}, ""},
		{"on", on, ""},
		{"hosts without a secret", func(c *webhooks.Config) { on(c); c.SigningSecret = "" }, "webhooks.signing_secret: required when webhooks.allowed_hosts is set"},
		{"secret without prefix", func(c *webhooks.Config) { on(c); c.SigningSecret = key(32)[6:] }, "does not start with whsec_"},
		{"secret not base64", func(c *webhooks.Config) { on(c); c.SigningSecret = "whsec_!!!" }, "webhooks.signing_secret: must be whsec_"},
		{"secret too short", func(c *webhooks.Config) { on(c); c.SigningSecret = key(16) }, "got 16 bytes"},
		{"secret too long", func(c *webhooks.Config) { on(c); c.SigningSecret = key(65) }, "got 65 bytes"},
		{"host with a wildcard", func(c *webhooks.Config) { on(c); c.AllowedHosts = []string{"*.example.com"} }, `webhooks.allowed_hosts: entry "*.example.com"`},
		{"host with a user", func(c *webhooks.Config) { on(c); c.AllowedHosts = []string{"https://u@h.example.com"} }, "must not carry a user"},
		{"zero timeout", func(c *webhooks.Config) { c.Timeout = 0 }, "webhooks.timeout: must be positive"},
		{"no attempts", func(c *webhooks.Config) { c.MaxAttempts = 0 }, "webhooks.max_attempts: must be at least 1"},
		{"zero max age", func(c *webhooks.Config) { c.MaxAge = 0 }, "webhooks.max_age: must be positive"},
		{"negative retry base", func(c *webhooks.Config) { c.RetryBase = -time.Second }, "webhooks.retry_base: must be positive"},
		{"zero poll interval", func(c *webhooks.Config) { c.PollInterval = 0 }, "webhooks.poll_interval: must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := webhooks.DefaultConfig()
			tt.mod(&c)
			err := c.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("valid config refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
}
