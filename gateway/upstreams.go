package gateway

import (
	"errors"
	"fmt"
	"net/url"
	"sync"

	"github.com/balletplanner/ballet/internal/ssrf"
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
	entries []ssrf.Endpoint

	// checked keeps Check's answer for each base_url seen (a credential's
	// is checked on every call); it starts over past maxChecked of them.
	mu      sync.Mutex
	checked map[string]error // nil: allowed
}

// maxChecked bounds the base URLs whose Check answers are kept.
const maxChecked = 1024

// NewUpstreams parses allow-list entries (ssrf.ParseEntry): a host
// ("api.openai.com", "llm.internal:8443", https only) or a URL prefix
// ("http://10.0.0.5:11434/v1"). An entry with a user, query, fragment or
// wildcard is refused.
func NewUpstreams(entries ...string) (*Upstreams, error) {
	u := &Upstreams{}
	for _, raw := range entries {
		ep, err := ssrf.ParseEntry(raw)
		if err != nil {
			return nil, fmt.Errorf("entry %q: %w", raw, err)
		}
		u.entries = append(u.entries, ep)
	}
	return u, nil
}

// Check returns nil when base names an allowed endpoint, else an error
// wrapping ErrUpstreamNotAllowed that says why.
func (u *Upstreams) Check(base string) error {
	if u == nil {
		return u.check(ssrf.Parse(base))
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if err, ok := u.checked[base]; ok {
		return err
	}
	err := u.check(ssrf.Parse(base))
	if u.checked == nil || len(u.checked) >= maxChecked {
		u.checked = make(map[string]error)
	}
	u.checked[base] = err
	return err
}

// CheckURL is Check of a URL parsed already: a request's.
func (u *Upstreams) CheckURL(target *url.URL) error {
	return u.check(ssrf.Of(target))
}

func (u *Upstreams) check(ep ssrf.Endpoint, err error) error {
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUpstreamNotAllowed, err)
	}
	if u != nil {
		for _, a := range u.entries {
			if a.Allows(ep) {
				return nil
			}
		}
	}
	return fmt.Errorf("%w: %s is not listed", ErrUpstreamNotAllowed, ep)
}

// CheckUpstream is Check in the form the api's credential routes take.
func (u *Upstreams) CheckUpstream(base string) error { return u.Check(base) }

// allow adds an endpoint the operator configured elsewhere (a provider
// URL, the fallback upstream).
func (u *Upstreams) allow(base string) error {
	ep, err := ssrf.ParseEntry(base)
	if err != nil {
		return err
	}
	u.mu.Lock()
	u.entries = append(u.entries, ep)
	u.checked = nil
	u.mu.Unlock()
	return nil
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
