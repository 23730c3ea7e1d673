package api

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/gofiber/fiber/v2"
)

// clientIPKey holds the request's client address in its locals (a /rpc
// socket gets a copy of them at the upgrade).
const clientIPKey = "ballet.client_ip"

// parseTrustedProxies parses server.trusted_proxies: CIDRs, or single
// addresses standing for their /32 or /128.
func parseTrustedProxies(list []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(list))
	for _, v := range list {
		p, err := parseProxy(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("server.trusted_proxies: %q is not a CIDR such as 10.0.0.0/8 or fd00::/8, nor an address: %w", v, err)
		}
		out = append(out, p)
	}
	return out, nil
}

func parseProxy(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		p = p.Masked()
		if p.Addr().Is4In6() && p.Bits() >= 96 { // ::ffff:10.0.0.0/104 is 10.0.0.0/8
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		return p, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	if a.Zone() != "" {
		return netip.Prefix{}, errors.New("an address with a zone")
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// fiberProxyConfig sets Fiber's own proxy settings from the trusted
// proxies: c.IsProxyTrusted() then holds for a peer among them only, and
// c.Protocol() and c.Hostname() believe X-Forwarded-Proto and
// X-Forwarded-Host from such a peer only (with none, from no one). Fiber's
// ProxyHeader is left unset, so c.IP() stays the peer: with it, c.IP()
// would be the first address of the first X-Forwarded-For line, which the
// client writes itself. remoteIP reads the header instead.
func fiberProxyConfig(cfg *fiber.Config, proxies []netip.Prefix) {
	cfg.EnableTrustedProxyCheck = true
	cfg.TrustedProxies = make([]string, len(proxies))
	for i, p := range proxies {
		cfg.TrustedProxies[i] = p.String()
	}
}

// remoteIP is the client address of the request: its peer, unless the peer
// is a trusted proxy (server.trusted_proxies). Then X-Forwarded-For (all of
// its lines, in order) is read from the right, as each proxy appends the
// address it was reached from: the client is the first address that is not
// a trusted proxy, or the farthest when all are. An entry that is not an
// address (with or without a port) ends the walk at the trusted hop that
// wrote it: what lies beyond cannot be told from what the client wrote.
// The access log and the failed-authentication limit key on it.
func (s *Server) remoteIP(c *fiber.Ctx) string {
	client := c.IP() // the peer: Fiber's ProxyHeader is unset
	if len(s.proxies) == 0 || !c.IsProxyTrusted() {
		return client
	}
	var hops []string
	for _, line := range c.Request().Header.PeekAll(fiber.HeaderXForwardedFor) {
		hops = append(hops, strings.Split(string(line), ",")...)
	}
	for i := len(hops) - 1; i >= 0; i-- {
		a, ok := hopAddr(hops[i])
		if !ok {
			break
		}
		client = a.String()
		if !s.trustedProxy(a) {
			break
		}
	}
	return client
}

// hopAddr reads one X-Forwarded-For entry: an address, or an address and
// port (1.2.3.4:80, [2001:db8::1]:80).
func hopAddr(entry string) (netip.Addr, bool) {
	entry = strings.TrimSpace(entry)
	if ap, err := netip.ParseAddrPort(entry); err == nil {
		return ap.Addr().Unmap().WithZone(""), true
	}
	a, err := netip.ParseAddr(entry)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}

// trustedProxy reports whether a is in server.trusted_proxies.
func (s *Server) trustedProxy(a netip.Addr) bool {
	for _, p := range s.proxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// remote is the request's client address (remoteIP), worked out once per
// request by the access log.
func (s *Server) remote(c *fiber.Ctx) string {
	if ip, ok := c.Locals(clientIPKey).(string); ok {
		return ip
	}
	ip := s.remoteIP(c)
	c.Locals(clientIPKey, ip)
	return ip
}
