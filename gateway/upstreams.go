package gateway

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path"
	"strings"
	"sync"
)

// UpstreamRule says which endpoints a credential's base_url may name, for
// messages.
const UpstreamRule = "its scheme, host, port and path must match an entry of gateway.allowed_upstreams " +
	"(a host means https on port 443 of that host; a URL allows that scheme, host, port and path prefix)"

// ErrUpstreamNotAllowed is wrapped by every refusal of Upstreams.Check.
var ErrUpstreamNotAllowed = errors.New("not an allowed upstream")

// Upstreams is the operator's allow list of upstream endpoints. The gateway
// sends a credential's key only to a base_url it allows.
type Upstreams struct {
	entries []endpoint

	// checked keeps Check's answer for each base_url seen (a credential's
	// is checked on every call); it starts over past maxChecked of them.
	mu      sync.Mutex
	checked map[string]error // nil: allowed
}

// maxChecked bounds the base URLs whose Check answers are kept.
const maxChecked = 1024

// endpoint is one allowed scheme, host and port, with a path prefix ("" for
// any path).
type endpoint struct {
	scheme, host, port, path string
}

// NewUpstreams parses allow-list entries: a host ("api.openai.com",
// "llm.internal:8443", https only) or a URL prefix
// ("http://10.0.0.5:11434/v1"). An entry with a user, query, fragment or
// wildcard is refused.
func NewUpstreams(entries ...string) (*Upstreams, error) {
	u := &Upstreams{}
	for _, raw := range entries {
		ep, err := parseEntry(raw)
		if err != nil {
			return nil, fmt.Errorf("entry %q: %w", raw, err)
		}
		u.entries = append(u.entries, ep)
	}
	return u, nil
}

func parseEntry(raw string) (endpoint, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return endpoint{}, errors.New("must not be empty")
	}
	if strings.ContainsAny(raw, "*?#\\ ") {
		return endpoint{}, errors.New("must be a host or a URL prefix without wildcards, query or fragment")
	}
	if !strings.Contains(raw, "://") {
		raw = "https://" + raw
	}
	ep, err := parseEndpoint(raw)
	if err != nil {
		return endpoint{}, err
	}
	ep.path = strings.TrimRight(ep.path, "/")
	return ep, nil
}

// parseEndpoint reads an absolute http(s) URL into its parts, refusing
// what could make the URL mean another host than it shows.
func parseEndpoint(raw string) (endpoint, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return endpoint{}, errors.New("not a URL")
	}
	return endpointOf(u)
}

// endpointOf is parseEndpoint of a URL parsed already.
func endpointOf(u *url.URL) (endpoint, error) {
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return endpoint{}, errors.New("scheme must be http or https")
	case u.Opaque != "" || u.Host == "":
		return endpoint{}, errors.New("must name a host")
	case u.User != nil:
		return endpoint{}, errors.New("must not carry a user or password")
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return endpoint{}, errors.New("must not have a query or fragment")
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if host == "" {
		return endpoint{}, errors.New("must name a host")
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	p := u.Path
	if strings.Contains(u.EscapedPath(), "%") {
		// An escaped separator or dot (%2F, %2E) reads differently upstream
		// than here.
		return endpoint{}, errors.New("path must not contain percent-escapes")
	}
	if q := strings.TrimSuffix(p, "/"); q != "" && path.Clean(q) != q {
		return endpoint{}, errors.New("path must not contain . or .. or empty segments")
	}
	return endpoint{scheme: u.Scheme, host: host, port: port, path: p}, nil
}

// Check returns nil when base names an allowed endpoint, else an error
// wrapping ErrUpstreamNotAllowed that says why.
func (u *Upstreams) Check(base string) error {
	if u == nil {
		return u.check(parseEndpoint(base))
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if err, ok := u.checked[base]; ok {
		return err
	}
	err := u.check(parseEndpoint(base))
	if u.checked == nil || len(u.checked) >= maxChecked {
		u.checked = make(map[string]error)
	}
	u.checked[base] = err
	return err
}

// CheckURL is Check of a URL parsed already: a request's.
func (u *Upstreams) CheckURL(target *url.URL) error {
	return u.check(endpointOf(target))
}

func (u *Upstreams) check(ep endpoint, err error) error {
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUpstreamNotAllowed, err)
	}
	if u != nil {
		for _, a := range u.entries {
			if a.allows(ep) {
				return nil
			}
		}
	}
	return fmt.Errorf("%w: %s://%s is not listed", ErrUpstreamNotAllowed, ep.scheme, net.JoinHostPort(ep.host, ep.port))
}

// CheckUpstream is Check in the form the api's credential routes take.
func (u *Upstreams) CheckUpstream(base string) error { return u.Check(base) }

// allow adds an endpoint the operator configured elsewhere (a provider
// URL, the fallback upstream).
func (u *Upstreams) allow(base string) error {
	ep, err := parseEntry(base)
	if err != nil {
		return err
	}
	u.mu.Lock()
	u.entries = append(u.entries, ep)
	u.checked = nil
	u.mu.Unlock()
	return nil
}

// allows matches scheme, host and port exactly and the path by whole
// segments: /v1 allows /v1 and /v1/chat, not /v10.
func (a endpoint) allows(c endpoint) bool {
	if a.scheme != c.scheme || a.host != c.host || a.port != c.port {
		return false
	}
	return a.path == "" || c.path == a.path || strings.HasPrefix(c.path, a.path+"/")
}

// Upstreams builds the allow list of the configuration: allowed_upstreams
// plus anthropic_url and openai_url, which the operator set too.
func (c Config) Upstreams() (*Upstreams, error) {
	u, err := NewUpstreams(c.AllowedUpstreams...)
	if err != nil {
		return nil, fmt.Errorf("gateway.allowed_upstreams: %w", err)
	}
	for _, kv := range [][2]string{{"gateway.anthropic_url", c.AnthropicURL}, {"gateway.openai_url", c.OpenAIURL}} {
		if err := u.allow(kv[1]); err != nil {
			return nil, fmt.Errorf("%s: %w", kv[0], err)
		}
	}
	return u, nil
}
