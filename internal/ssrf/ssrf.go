// Package ssrf holds the rules that keep the servers from being steered at
// hosts the operator did not name: allow lists of endpoints (scheme, host,
// port and path prefix) and the address check made when dialling. The
// gateway applies them to credentials' base URLs (gateway.allowed_upstreams)
// and the webhooks to the URLs of sends (webhooks.allowed_hosts).
package ssrf

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"path"
	"strings"
	"syscall"
)

// Endpoint is one scheme, host and port, with a path prefix ("" for any
// path).
type Endpoint struct {
	Scheme, Host, Port, Path string
}

// ParseEntry parses an allow-list entry: a host ("api.openai.com",
// "llm.internal:8443", https only) or a URL prefix
// ("http://10.0.0.5:11434/v1"). An entry with a user, query, fragment or
// wildcard is refused.
func ParseEntry(raw string) (Endpoint, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return Endpoint{}, errors.New("must not be empty")
	}
	if strings.ContainsAny(raw, "*?#\\ ") {
		return Endpoint{}, errors.New("must be a host or a URL prefix without wildcards, query or fragment")
	}
	if !strings.Contains(raw, "://") {
		raw = "https://" + raw
	}
	ep, err := Parse(raw)
	if err != nil {
		return Endpoint{}, err
	}
	ep.Path = strings.TrimRight(ep.Path, "/")
	return ep, nil
}

// Parse reads an absolute http(s) URL into its parts, refusing what could
// make the URL mean another host than it shows.
func Parse(raw string) (Endpoint, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Endpoint{}, errors.New("not a URL")
	}
	return Of(u)
}

// Of is Parse of a URL parsed already.
func Of(u *url.URL) (Endpoint, error) {
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return Endpoint{}, errors.New("scheme must be http or https")
	case u.Opaque != "" || u.Host == "":
		return Endpoint{}, errors.New("must name a host")
	case u.User != nil:
		return Endpoint{}, errors.New("must not carry a user or password")
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return Endpoint{}, errors.New("must not have a query or fragment")
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if host == "" {
		return Endpoint{}, errors.New("must name a host")
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	p := u.Path
	if strings.Contains(u.EscapedPath(), "%") {
		// An escaped separator or dot (%2F, %2E) reads differently upstream
		// than here.
		return Endpoint{}, errors.New("path must not contain percent-escapes")
	}
	if q := strings.TrimSuffix(p, "/"); q != "" && path.Clean(q) != q {
		return Endpoint{}, errors.New("path must not contain . or .. or empty segments")
	}
	return Endpoint{Scheme: u.Scheme, Host: host, Port: port, Path: p}, nil
}

// Allows matches scheme, host and port exactly and the path by whole
// segments: /v1 allows /v1 and /v1/chat, not /v10.
func (a Endpoint) Allows(c Endpoint) bool {
	if a.Scheme != c.Scheme || a.Host != c.Host || a.Port != c.Port {
		return false
	}
	return a.Path == "" || c.Path == a.Path || strings.HasPrefix(c.Path, a.Path+"/")
}

// String is the endpoint's scheme, host and port.
func (a Endpoint) String() string {
	return a.Scheme + "://" + net.JoinHostPort(a.Host, a.Port)
}

// Public reports whether addr is a public unicast address: not loopback,
// private (RFC 1918, fc00::/7), link-local, unspecified, multicast, CGNAT
// (100.64.0.0/10) or an IPv4-mapped form of one of those.
func Public(addr netip.Addr) bool {
	addr = addr.Unmap()
	switch {
	case !addr.IsValid(), addr.IsLoopback(), addr.IsPrivate(), addr.IsLinkLocalUnicast(),
		addr.IsLinkLocalMulticast(), addr.IsInterfaceLocalMulticast(), addr.IsMulticast(), addr.IsUnspecified():
		return false
	case addr.Is4() && cgnat.Contains(addr):
		return false
	}
	return true
}

var cgnat = netip.MustParsePrefix("100.64.0.0/10")

// ErrPrivateAddress is wrapped by DialControl's refusals.
var ErrPrivateAddress = errors.New("not a public address")

// DialControl is a net.Dialer Control that refuses to connect to an
// address that is not Public, unless allowPrivate: the check is made on
// the address resolved, so a name that resolves (or rebinds) to a private
// address is refused too.
func DialControl(allowPrivate bool) func(network, address string, c syscall.RawConn) error {
	return func(network, address string, _ syscall.RawConn) error {
		if allowPrivate {
			return nil
		}
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("ssrf: dial %s: %w", address, err)
		}
		if !Public(ap.Addr()) {
			return fmt.Errorf("ssrf: dial %s: %w", address, ErrPrivateAddress)
		}
		return nil
	}
}
