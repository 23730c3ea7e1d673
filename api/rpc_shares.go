package api

import (
	"fmt"
	"sync"

	"github.com/balletplanner/ballet/store"
)

// rpcShares keeps the /rpc pool from being one client's: sockets that have
// not authenticated yet hold a small pool of their own
// (server.rpc_max_unauthenticated), of which one address holds at most
// server.rpc_max_unauthenticated_per_address; an authenticated socket
// counts against its organization's share
// (server.rpc_max_connections_per_organization). So 200 upgrades that
// never authenticate, or one tenant's 9,000 idle sockets, leave room for
// everyone else.
type rpcShares struct {
	maxTotal, maxUnauth, maxUnauthPerAddr, maxPerOrg int

	mu       sync.Mutex
	unauth   int
	authed   int
	unauthBy map[string]int // by client address
	byOrg    map[string]int // by organization id, or "subject:" and the subject for one in no organization
}

func newRPCShares(cfg rpcSettings) *rpcShares {
	return &rpcShares{maxTotal: cfg.maxConns, maxUnauth: cfg.maxUnauth, maxUnauthPerAddr: cfg.maxUnauthPerAddr,
		maxPerOrg: cfg.maxPerOrg, unauthBy: map[string]int{}, byOrg: map[string]int{}}
}

// admit takes an unauthenticated place for a socket from ip, or says why
// there is none.
func (r *rpcShares) admit(ip string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.unauth >= r.maxUnauth:
		return fmt.Errorf("this server holds its limit of %d realtime connections that have not authenticated yet (server.rpc_max_unauthenticated)", r.maxUnauth)
	case r.unauthBy[ip] >= r.maxUnauthPerAddr:
		return fmt.Errorf("%s holds its limit of %d realtime connections that have not authenticated yet (server.rpc_max_unauthenticated_per_address)", ip, r.maxUnauthPerAddr)
	}
	r.unauth++
	r.unauthBy[ip]++
	return nil
}

// authenticated moves a socket from ip's unauthenticated places into its
// principal's organization share; the key it returns releases it.
func (r *rpcShares) authenticated(ip string, p *store.Principal) (string, error) {
	key := shareKey(p)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byOrg[key] >= r.maxPerOrg && r.unauth+r.authed >= r.maxTotal-r.maxTotal/4 {
		return "", store.Errorf(store.CodeUnavailable, "your organization holds its share of %d realtime connections on this server (server.rpc_max_connections_per_organization); close some, or reconnect to another replica", r.maxPerOrg)
	}
	r.byOrg[key]++
	r.authed++
	r.dropUnauth(ip)
	return key, nil
}

// release frees a closing socket's place: its organization share when it
// authenticated (key), else its unauthenticated one.
func (r *rpcShares) release(ip, key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if key == "" {
		r.dropUnauth(ip)
		return
	}
	r.authed--
	if r.byOrg[key]--; r.byOrg[key] <= 0 {
		delete(r.byOrg, key)
	}
}

func (r *rpcShares) dropUnauth(ip string) {
	r.unauth--
	if r.unauthBy[ip]--; r.unauthBy[ip] <= 0 {
		delete(r.unauthBy, ip)
	}
}

// shareKey is the share a principal's sockets count against: its one
// organization; a subject bound in several, or in none (a platform admin),
// has a share of its own.
func shareKey(p *store.Principal) string {
	org := ""
	for _, b := range p.Bindings {
		switch {
		case b.Scope.OrganizationID == "":
		case org == "":
			org = b.Scope.OrganizationID
		case org != b.Scope.OrganizationID:
			return "subject:" + p.Subject
		}
	}
	if org == "" {
		return "subject:" + p.Subject
	}
	return org
}

// takeShare moves the socket, at its first auth, from the unauthenticated
// pool into its organization's share.
func (c *rpcConn) takeShare(p *store.Principal) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.share != "" {
		return nil
	}
	key, err := c.srv.shares.authenticated(c.ip, p)
	if err != nil {
		return err
	}
	c.share = key
	return nil
}

// shareKey is the share the socket counts against; "" while it has not
// authenticated.
func (c *rpcConn) shareKey() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.share
}
