// Package api is Ballet's HTTP face: REST, the realtime websocket, auth, the
// asynq dashboard mount and health.
package api

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/balletplanner/ballet/store"
)

// Config is the [server] section of the configuration.
type Config struct {
	// Addr is where the api listens.
	Addr string `toml:"addr"`
	// ShutdownTimeout is how long a stopping api gives its running requests
	// and open sockets.
	ShutdownTimeout time.Duration `toml:"shutdown_timeout"`
	// BodyLimit caps request bodies, in bytes.
	BodyLimit int `toml:"body_limit"`
	// MaxQueuedTurns caps queued planner turns across all projects: once
	// it is reached, a send is refused if its organization already has its
	// share of it (by scheduling weight), so the total may exceed it by at
	// most the sum of the shares.
	MaxQueuedTurns int `toml:"max_queued_turns"`
	// MaxQueuedTurnsPerProject caps queued planner turns of one project.
	MaxQueuedTurnsPerProject int `toml:"max_queued_turns_per_project"`
	// MaxQueuedTurnsPerOrganization caps queued planner turns of one
	// organization; an organization's own max_queued_turns overrides it.
	MaxQueuedTurnsPerOrganization int `toml:"max_queued_turns_per_organization"`
	// RPCAllowedOrigins are the browser origins (scheme://host[:port])
	// besides the api's own that may open /rpc; "*" allows every origin.
	RPCAllowedOrigins []string `toml:"rpc_allowed_origins"`
	// RPCMaxConnections caps the /rpc sockets one process holds; 0 is
	// 20,000 or what the process's open-file limit leaves room for, the
	// lower (CheckFileLimit).
	RPCMaxConnections int `toml:"rpc_max_connections"`
	// RPCMaxUnauthenticated caps the /rpc sockets that have not sent a
	// valid auth yet; 0 is a twentieth of rpc_max_connections (at least 64).
	RPCMaxUnauthenticated int `toml:"rpc_max_unauthenticated"`
	// RPCMaxUnauthenticatedPerAddress caps those of one client address; 0
	// is a tenth of rpc_max_unauthenticated (at least 16).
	RPCMaxUnauthenticatedPerAddress int `toml:"rpc_max_unauthenticated_per_address"`
	// RPCMaxConnectionsPerOrganization is one organization's share of the
	// authenticated sockets, enforced while less than a quarter of
	// rpc_max_connections is free; 0 is half of rpc_max_connections (all
	// of it, up to 100).
	RPCMaxConnectionsPerOrganization int `toml:"rpc_max_connections_per_organization"`
	// RPCHeartbeat is the $/heartbeat interval; a client silent for three
	// of them is closed with 4000.
	RPCHeartbeat time.Duration `toml:"rpc_heartbeat"`
	// RPCAuthTimeout is how long a socket may stay open without a valid auth.
	RPCAuthTimeout time.Duration `toml:"rpc_auth_timeout"`
	// RPCWriteTimeout is how long a socket's outbox may stay full, or one
	// frame take to write, before the client is closed as not reading.
	RPCWriteTimeout time.Duration `toml:"rpc_write_timeout"`
	// RPCMaxFrameBytes caps one incoming frame.
	RPCMaxFrameBytes int `toml:"rpc_max_frame_bytes"`
	// RPCMaxInflight caps the requests of one socket that run at once.
	RPCMaxInflight int `toml:"rpc_max_inflight"`
	// RPCRequestsPerSecond and RPCRequestBurst are each socket's request
	// rate limit (a token bucket).
	RPCRequestsPerSecond int `toml:"rpc_requests_per_second"`
	RPCRequestBurst      int `toml:"rpc_request_burst"`
	// TrustedProxies are the CIDRs (or single addresses) of the proxies in
	// front of the api, such as the ingress: from such a peer the client
	// address is read from X-Forwarded-For (the nearest address that is not
	// a trusted proxy), for the failed-authentication limit and the access
	// log, and X-Forwarded-Proto and X-Forwarded-Host are believed. Empty
	// trusts none: the client is the peer.
	TrustedProxies []string `toml:"trusted_proxies"`
	// CORSAllowedOrigins are the browser origins (scheme://host[:port], or
	// scheme://*.domain for its subdomains; "*" for any) that may call
	// /api/v1 from another origin. Empty (the default) allows none.
	CORSAllowedOrigins []string `toml:"cors_allowed_origins"`
	// StreamRecheck is how often a planner.watch, a stream.subscribe and an
	// outputs event stream check again that their token is valid and that
	// the permission they started with still holds.
	StreamRecheck time.Duration `toml:"stream_recheck"`
}

// DefaultConfig returns the built-in server defaults of SPEC §1.
func DefaultConfig() Config {
	return Config{Addr: ":8080", ShutdownTimeout: 10 * time.Second, BodyLimit: 1 << 20,
		MaxQueuedTurns: 10000, MaxQueuedTurnsPerProject: 1000, MaxQueuedTurnsPerOrganization: 5000,
		RPCAllowedOrigins: []string{}, CORSAllowedOrigins: []string{}, TrustedProxies: []string{}, RPCMaxConnections: 0, RPCHeartbeat: defaultRPCHeartbeat,
		RPCAuthTimeout: defaultRPCAuthTimeout, RPCWriteTimeout: defaultRPCWriteTimeout, RPCMaxFrameBytes: defaultRPCMaxFrameBytes, RPCMaxInflight: defaultRPCMaxInflight,
		RPCRequestsPerSecond: defaultRPCRequestsPerSecond, RPCRequestBurst: defaultRPCRequestBurst,
		StreamRecheck: defaultStreamRecheck}
}

// Validate reports the first invalid key of the section.
func (c Config) Validate() error {
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("server.addr: %w", err)
	}
	if c.ShutdownTimeout <= 0 {
		return errors.New("server.shutdown_timeout: must be positive")
	}
	if c.BodyLimit < 1024 {
		return fmt.Errorf("server.body_limit: must be at least 1024, got %d", c.BodyLimit)
	}
	if c.MaxQueuedTurns < 1 {
		return fmt.Errorf("server.max_queued_turns: must be at least 1, got %d", c.MaxQueuedTurns)
	}
	if c.MaxQueuedTurnsPerProject < 1 {
		return fmt.Errorf("server.max_queued_turns_per_project: must be at least 1, got %d", c.MaxQueuedTurnsPerProject)
	}
	if c.MaxQueuedTurnsPerOrganization < 1 {
		return fmt.Errorf("server.max_queued_turns_per_organization: must be at least 1, got %d", c.MaxQueuedTurnsPerOrganization)
	}
	if _, err := parseTrustedProxies(c.TrustedProxies); err != nil {
		return err
	}
	for _, o := range c.CORSAllowedOrigins {
		if !validOrigin(strings.Replace(o, "://*.", "://", 1)) {
			return fmt.Errorf("server.cors_allowed_origins: %q is not an origin such as https://app.example.com, https://*.example.com or \"*\"", o)
		}
	}
	return c.validateRPC()
}

// QueueLimits are the caps on queued turns that the api's sends enforce.
func (c Config) QueueLimits() store.QueueLimits {
	return store.QueueLimits{Total: c.MaxQueuedTurns, PerProject: c.MaxQueuedTurnsPerProject,
		PerOrganization: c.MaxQueuedTurnsPerOrganization}
}

// Auth modes.
const (
	AuthToken = "token"
	AuthLocal = "local"
)

// AuthConfig is the [auth] section of the configuration.
type AuthConfig struct {
	// Mode is "token" (API tokens and OIDC) or "local" (every request is
	// subject "local" with platform-admin; loopback only).
	Mode string `toml:"mode"`
	// OIDC enables JWTs from an OpenID Connect issuer beside API tokens.
	OIDC OIDCConfig `toml:"oidc"`
	// FailureBurst is how many failed authentications one client address,
	// and one failing token, may make at once before a failure is answered
	// 429; a token that authenticates never is (failureLimiter).
	FailureBurst int `toml:"failure_burst"`
	// FailuresPerMinute is how fast an address or a token earns failed
	// attempts back.
	FailuresPerMinute int `toml:"failures_per_minute"`
	// TokenMaxTTL is the longest lifetime of an API token made through the
	// api (POST /tokens), and the lifetime of one made without a ttl; one
	// made by a caller signed in with an OIDC JWT ends with that JWT.
	TokenMaxTTL time.Duration `toml:"token_max_ttl"`
}

// Bounds of auth.token_max_ttl.
const (
	defaultTokenMaxTTL = 90 * 24 * time.Hour
	maxTokenMaxTTL     = 366 * 24 * time.Hour
)

// tokenMaxTTL is auth.token_max_ttl, the default standing in for zero.
func (c AuthConfig) tokenMaxTTL() time.Duration {
	if c.TokenMaxTTL == 0 {
		return defaultTokenMaxTTL
	}
	return c.TokenMaxTTL
}

// Defaults of the failed-authentication limit.
const (
	defaultFailureBurst      = 20
	defaultFailuresPerMinute = 60
)

// failureLimits are the configured limits, the defaults standing in for
// zero (a configuration built in code that leaves them out).
func (c AuthConfig) failureLimits() (perMinute, burst int) {
	perMinute, burst = c.FailuresPerMinute, c.FailureBurst
	if perMinute == 0 {
		perMinute = defaultFailuresPerMinute
	}
	if burst == 0 {
		burst = defaultFailureBurst
	}
	return perMinute, burst
}

// OIDCConfig is the [auth.oidc] section.
type OIDCConfig struct {
	// IssuerURL is the issuer whose JWKS signs accepted tokens; empty turns OIDC off.
	IssuerURL string `toml:"issuer_url"`
	// Audience is the required "aud" claim.
	Audience string `toml:"audience"`
}

// DefaultAuthConfig returns the built-in auth defaults.
func DefaultAuthConfig() AuthConfig {
	return AuthConfig{Mode: AuthToken, FailureBurst: defaultFailureBurst, FailuresPerMinute: defaultFailuresPerMinute,
		TokenMaxTTL: defaultTokenMaxTTL}
}

// Validate reports the first invalid key of the section. listen is
// server.addr: local mode is refused unless it is loopback only.
func (c AuthConfig) Validate(listen string) error {
	switch c.Mode {
	case AuthToken:
	case AuthLocal:
		host, _, _ := net.SplitHostPort(listen)
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return fmt.Errorf("auth.mode: \"local\" is refused because server.addr %q listens beyond loopback; use 127.0.0.1:PORT", listen)
		}
	default:
		return fmt.Errorf("auth.mode: must be %q or %q, got %q", AuthToken, AuthLocal, c.Mode)
	}
	if c.FailureBurst < 0 {
		return fmt.Errorf("auth.failure_burst: must be at least 1 (0 takes the default %d), got %d", defaultFailureBurst, c.FailureBurst)
	}
	if c.TokenMaxTTL < 0 || c.TokenMaxTTL > maxTokenMaxTTL || (c.TokenMaxTTL != 0 && c.TokenMaxTTL < time.Minute) {
		return fmt.Errorf("auth.token_max_ttl: must be 1m-%s (0 takes the default %s), got %s", maxTokenMaxTTL, defaultTokenMaxTTL, c.TokenMaxTTL)
	}
	if c.FailuresPerMinute < 0 {
		return fmt.Errorf("auth.failures_per_minute: must be at least 1 (0 takes the default %d), got %d", defaultFailuresPerMinute, c.FailuresPerMinute)
	}
	if c.OIDC.IssuerURL != "" {
		if u, err := url.Parse(c.OIDC.IssuerURL); err != nil || u.Scheme == "" || u.Host == "" {
			return fmt.Errorf("auth.oidc.issuer_url: not an absolute URL: %q", c.OIDC.IssuerURL)
		}
		if c.OIDC.Audience == "" {
			return errors.New("auth.oidc.audience: required with auth.oidc.issuer_url")
		}
	}
	return nil
}
