package api_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/api"
)

// Sockets that never authenticate hold a pool of their own, of which one
// address holds a part: they cannot block the authenticated.
func TestRPCUnauthenticatedSocketsHoldAPoolOfTheirOwn(t *testing.T) {
	t.Parallel()
	e := newRPCEnv(t, func(c *api.Config) {
		c.RPCMaxConnections = 10
		c.RPCMaxUnauthenticated = 3
		c.RPCMaxUnauthenticatedPerAddress = 2
	})
	a := e.mustRaw(t, api.SubprotocolJSON)
	e.mustRaw(t, api.SubprotocolJSON)
	_, res, err := e.dialRaw(t, nil, api.SubprotocolJSON)
	if err == nil || res == nil || res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" {
		t.Fatalf("a third unauthenticated socket from one address: %v %+v; want 503 with Retry-After", err, res)
	}
	b, _ := io.ReadAll(res.Body)
	if !strings.Contains(string(b), "holds its limit of 2 realtime connections that have not authenticated yet (server.rpc_max_unauthenticated_per_address)") {
		t.Fatalf("body %s", b)
	}
	// Once one authenticates, its place is free again.
	if code, msg := rpcErr(a.call(t, 1, "auth", map[string]any{"token": e.tokens["viewer"]})); code != 0 {
		t.Fatalf("auth: %d %s", code, msg)
	}
	e.mustRaw(t, api.SubprotocolJSON)
}

// While the pool is nearly full, one organization's sockets past its share
// are refused at auth; another organization's are taken.
func TestRPCOrganizationShare(t *testing.T) {
	t.Parallel()
	e := newRPCEnv(t, func(c *api.Config) {
		c.RPCMaxConnections = 4
		c.RPCMaxUnauthenticated = 4
		c.RPCMaxUnauthenticatedPerAddress = 4
		c.RPCMaxConnectionsPerOrganization = 1
	})
	first := e.mustRaw(t, api.SubprotocolJSON)
	if code, msg := rpcErr(first.call(t, 1, "auth", map[string]any{"token": e.tokens["viewer"]})); code != 0 {
		t.Fatalf("auth: %d %s", code, msg)
	}
	// Below three quarters full, the share is not enforced.
	second := e.mustRaw(t, api.SubprotocolJSON)
	if code, msg := rpcErr(second.call(t, 1, "auth", map[string]any{"token": e.tokens["engineer"]})); code != 0 {
		t.Fatalf("auth of acme's second socket with room to spare: %d %s", code, msg)
	}
	third, fourth := e.mustRaw(t, api.SubprotocolJSON), e.mustRaw(t, api.SubprotocolJSON)
	code, msg := rpcErr(third.call(t, 1, "auth", map[string]any{"token": e.tokens["admin"]}))
	if code == 0 || !strings.Contains(msg, "your organization holds its share of 1 realtime connections on this server (server.rpc_max_connections_per_organization)") {
		t.Fatalf("acme's third socket with the pool nearly full: %d %s", code, msg)
	}
	if code, msg := rpcErr(fourth.call(t, 1, "auth", map[string]any{"token": e.tokens["outsider"]})); code != 0 {
		t.Fatalf("another organization's socket: %d %s", code, msg)
	}
}
