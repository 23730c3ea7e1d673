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
