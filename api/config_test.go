package api_test

import (
	"strings"
	"testing"

	"github.com/balletplanner/ballet/api"
)

func TestAuthConfigValidate(t *testing.T) {
	t.Parallel()
	oidc := api.OIDCConfig{IssuerURL: "https://id.example.com", Audience: "ballet"}
	tests := []struct {
		name   string
		cfg    api.AuthConfig
		listen string
		want   string // "" for valid; else a substring of the error
	}{
		{"local on all interfaces", api.AuthConfig{Mode: api.AuthLocal}, "0.0.0.0:8080", "auth.mode"},
		{"local on any address", api.AuthConfig{Mode: api.AuthLocal}, ":8080", "auth.mode"},
		{"local on a LAN address", api.AuthConfig{Mode: api.AuthLocal}, "192.168.1.10:8080", "auth.mode"},
		{"local on IPv6 any", api.AuthConfig{Mode: api.AuthLocal}, "[::]:8080", "auth.mode"},
		{"local on loopback", api.AuthConfig{Mode: api.AuthLocal}, "127.0.0.1:8080", ""},
		{"local on IPv6 loopback", api.AuthConfig{Mode: api.AuthLocal}, "[::1]:8080", ""},
		{"local on localhost", api.AuthConfig{Mode: api.AuthLocal}, "localhost:8080", ""},
		{"token on all interfaces", api.AuthConfig{Mode: api.AuthToken}, ":8080", ""},
		{"unknown mode", api.AuthConfig{Mode: "open"}, "127.0.0.1:8080", "auth.mode"},
		{"oidc", api.AuthConfig{Mode: api.AuthToken, OIDC: oidc}, ":8080", ""},
		{"oidc without audience", api.AuthConfig{Mode: api.AuthToken, OIDC: api.OIDCConfig{IssuerURL: oidc.IssuerURL}}, ":8080", "auth.oidc.audience"},
		{"negative failure burst", api.AuthConfig{Mode: api.AuthToken, FailureBurst: -1}, ":8080", "auth.failure_burst"},
		{"negative failure rate", api.AuthConfig{Mode: api.AuthToken, FailuresPerMinute: -5}, ":8080", "auth.failures_per_minute"},
		{"oidc relative issuer", api.AuthConfig{Mode: api.AuthToken, OIDC: api.OIDCConfig{IssuerURL: "id.example.com", Audience: "ballet"}}, ":8080", "auth.oidc.issuer_url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate(tt.listen)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("error %v, want one naming %q", err, tt.want)
			}
		})
	}
}

// TestTrustedProxiesConfig: server.trusted_proxies takes CIDRs and single
// addresses; anything else is refused at start-up, by Validate and by New,
// with a message naming the key and the value.
func TestTrustedProxiesConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		proxies []string
		bad     string // "" for valid; else the value the error names
	}{
		{"none", nil, ""},
		{"CIDRs and addresses", []string{"10.0.0.0/8", "fd00::/8", "192.168.1.7", "::1", "172.16.0.0/12"}, ""},
		{"a prefix too long", []string{"10.0.0.0/8", "10.0.0.0/33"}, "10.0.0.0/33"},
		{"not an address", []string{"ingress.local"}, "ingress.local"},
		{"a short address", []string{"10.0.0/8"}, "10.0.0/8"},
		{"a zone", []string{"fe80::1%eth0"}, "fe80::1%eth0"},
		{"empty", []string{""}, `""`},
		{"a port", []string{"10.0.0.1:443"}, "10.0.0.1:443"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := api.DefaultConfig()
			cfg.TrustedProxies = tt.proxies
			errs := map[string]error{"Validate": cfg.Validate()}
			_, errs["New"] = api.New(cfg, api.DefaultAuthConfig(), api.Deps{})
			for op, err := range errs {
				switch {
				case tt.bad == "" && err != nil:
					t.Fatalf("%s: unexpected error: %v", op, err)
				case tt.bad != "" && (err == nil || !strings.Contains(err.Error(), "server.trusted_proxies: ") || !strings.Contains(err.Error(), tt.bad)):
					t.Fatalf("%s: error %v, want one naming server.trusted_proxies and %s", op, err, tt.bad)
				}
			}
		})
	}
}
