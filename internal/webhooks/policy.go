package webhooks

import (
	"context"
	"fmt"
	"net/netip"
	"net/url"
	"strings"

	"github.com/balletplanner/ballet/internal/ssrf"
	"github.com/balletplanner/ballet/store"
)

// maxURLLen bounds a webhook URL.
const maxURLLen = 2048

// Policy decides which webhook URLs a send may name: an absolute http(s)
// URL without user, fragment or escapes in its path (the gateway's rules
// for an upstream, ssrf.Of) whose endpoint an allowed_hosts entry allows,
// naming no private address unless AllowPrivateNetworks. The Sender checks
// again at delivery, and each address it dials.
type Policy struct {
	entries      []ssrf.Endpoint
	allowPrivate bool
}

// NewPolicy builds the policy of a valid configuration.
func NewPolicy(c Config) (*Policy, error) {
	p := &Policy{allowPrivate: c.AllowPrivateNetworks}
	for _, h := range c.AllowedHosts {
		ep, err := ssrf.ParseEntry(h)
		if err != nil {
			return nil, fmt.Errorf("webhooks.allowed_hosts: entry %q: %w", h, err)
		}
		p.entries = append(p.entries, ep)
	}
	return p, nil
}

// CheckWebhook returns nil when raw is a webhook URL a send may name, else
// an invalid_argument error that says why.
func (p *Policy) CheckWebhook(_ context.Context, raw string) error {
	if err := p.check(raw); err != nil {
		return store.Errorf(store.CodeInvalid, "webhook: %v", err)
	}
	return nil
}

func (p *Policy) check(raw string) error {
	if len(raw) > maxURLLen {
		return fmt.Errorf("at most %d bytes, got %d", maxURLLen, len(raw))
	}
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() {
		return fmt.Errorf("must be an absolute https URL, got %q", raw)
	}
	if u.RawQuery != "" || u.ForceQuery {
		// A query is the receiver's business: the endpoint is what is checked.
		q := *u
		q.RawQuery, q.ForceQuery = "", false
		u = &q
	}
	ep, err := ssrf.Of(u)
	if err != nil {
		return fmt.Errorf("%q: %w", raw, err)
	}
	if len(p.entries) == 0 {
		return fmt.Errorf("%s is not allowed: this server allows no webhooks (webhooks.allowed_hosts is empty)", ep)
	}
	allowed := false
	for _, a := range p.entries {
		allowed = allowed || a.Allows(ep)
	}
	if !allowed {
		return fmt.Errorf("%s%s is not allowed: it must match an entry of webhooks.allowed_hosts", ep, ep.Path)
	}
	if addr, err := netip.ParseAddr(strings.Trim(ep.Host, "[]")); err == nil && !p.allowPrivate && !ssrf.Public(addr) {
		return fmt.Errorf("%s names a private, loopback or link-local address (webhooks.allow_private_networks is off)", ep)
	}
	return nil
}

// allows is the check of a stored URL at delivery: the configuration may
// have changed since the send.
func (p *Policy) allows(raw string) error { return p.check(raw) }
