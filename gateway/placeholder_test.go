package gateway

import (
	"crypto/rand"
	"encoding/base64"
	"strings"
	"testing"
)

// TestConfigRefusesPlaceholderKeys: every signing or credentials key that is
// an obvious placeholder is refused by Validate with an error naming the key
// and saying how to make a real one; a random key is accepted.
func TestConfigRefusesPlaceholderKeys(t *testing.T) {
	t.Parallel()
	placeholders := []string{
		"change-me-in-production", "changeme", "change-me", "CHANGE_ME", "Change Me Now",
		"secret", "SECRET", "example", "placeholder", "password", "changeit",
		"REPLACE-ME", "REPLACE-ME-not-a-signing-key", "REPLACE-ME-not-a-base64-aes-256-key",
		"replace_me_with_a_key", strings.Repeat("k", 32), strings.Repeat("0", 64),
		strings.Repeat("A", 43) + "=", " changeme\n",
	}
	keys := []struct {
		name string
		set  func(c *Config, v string)
	}{
		{"gateway.signing_key", func(c *Config, v string) { c.SigningKey = v }},
		{"gateway.credentials_key", func(c *Config, v string) { c.CredentialsKey = v }},
	}
	for _, k := range keys {
		for _, p := range placeholders {
			t.Run(k.name+"/"+p, func(t *testing.T) {
				t.Parallel()
				c := DefaultConfig()
				k.set(&c, p)
				err := c.Validate()
				if err == nil {
					t.Fatalf("%s = %q accepted", k.name, p)
				}
				msg := err.Error()
				if !strings.HasPrefix(msg, k.name+": is a placeholder") || !strings.Contains(msg, "openssl rand -base64 32") {
					t.Fatalf("error %q: want it to name %s, call it a placeholder and say how to make a key", msg, k.name)
				}
			})
		}
	}
}

func TestConfigAcceptsRealKeys(t *testing.T) {
	t.Parallel()
	raw := make([]byte, 32)
	rand.Read(raw)
	key := base64.StdEncoding.EncodeToString(raw)
	for _, tc := range []struct {
		name string
		edit func(*Config)
	}{
		{"random signing key", func(c *Config) { c.SigningKey = key }},
		{"random credentials key", func(c *Config) { c.CredentialsKey = key }},
		{"both", func(c *Config) { c.SigningKey, c.CredentialsKey = key, key }},
		{"hex signing key", func(c *Config) { c.SigningKey = "0123456789abcdef0123456789abcdef" }},
		{"words that only contain a placeholder", func(c *Config) { c.SigningKey = "my-secret-signing-key-for-the-tests" }},
		{"unset", func(c *Config) { c.SigningKey, c.CredentialsKey = "", "" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := DefaultConfig()
			tc.edit(&c)
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestRefusePlaceholderKeepsTheValueOut(t *testing.T) {
	t.Parallel()
	err := RefusePlaceholder("auth.key", "change-me-in-production")
	if err == nil || strings.Contains(err.Error(), "in-production") || !strings.HasPrefix(err.Error(), "auth.key: ") {
		t.Fatalf("error %v: want one naming auth.key without echoing the value", err)
	}
}
